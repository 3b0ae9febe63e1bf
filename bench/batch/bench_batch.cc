// Batches of small objects: K objects of one size allocated, their first
// bytes touched, then all freed, over and over -- the node allocators'
// and a request's pattern. Modes:
//   malloc       K malloc calls, then K free calls (under LD_PRELOAD: the
//                peer's malloc; memd's shim as "memd")
//   heap-single  the same K calls on a memd::Heap
//   heap-batch   one alloc_batch and one free_batch of K on a memd::Heap
//   list-heap    a std::list of K nodes of SIZE bytes (links included) built
//                then cleared, on a memd::Heap through memd::Allocator
//   list-node    the same list through memd::NodeAllocator (its nodes from
//                alloc_batch, given back with free_batch)
// Prints "ns_per_object=<x>" for one alloc and its free.
//
//   bench_batch MODE SIZE K SECONDS
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <memory>
#include <vector>

#include "client/allocators.h"
#include "client/heap.h"

namespace {

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Runs fn (one round of K objects) until `seconds` pass; objects per second.
template <class Fn>
double rate(size_t k, double seconds, Fn fn) {
  for (int i = 0; i < 1000; ++i) fn();  // warm: blocks made, caches full
  uint64_t rounds = 0;
  double start = now_s(), end = start + seconds, t = start;
  while (t < end) {
    for (int i = 0; i < 256; ++i) fn();
    rounds += 256;
    t = now_s();
  }
  return static_cast<double>(rounds * k) / (t - start);
}

// A list node of `Size` bytes with libstdc++'s two links.
template <size_t Size>
struct Payload {
  unsigned char bytes[Size > 24 ? Size - 16 : 8];
};

// K nodes pushed, the first byte of each written, then the list cleared.
template <class Alloc, size_t Size>
double list_rate(memd::Heap& heap, size_t k, double seconds) {
  std::list<Payload<Size>, Alloc> list{Alloc(heap)};
  volatile unsigned char sink = 0;
  return rate(k, seconds, [&] {
    for (size_t i = 0; i < k; ++i) list.emplace_back().bytes[0] = static_cast<unsigned char>(i);
    for (const auto& n : list) sink = sink + n.bytes[0];
    list.clear();
  });
}

template <template <class> class Alloc>
double list_rate_of_size(memd::Heap& heap, size_t size, size_t k, double seconds) {
  switch (size) {
    case 16: return list_rate<Alloc<Payload<16>>, 16>(heap, k, seconds);
    case 64: return list_rate<Alloc<Payload<64>>, 64>(heap, k, seconds);
    case 256: return list_rate<Alloc<Payload<256>>, 256>(heap, k, seconds);
    case 1024: return list_rate<Alloc<Payload<1024>>, 1024>(heap, k, seconds);
    default: std::fprintf(stderr, "list sizes: 16, 64, 256, 1024\n"); std::exit(2);
  }
}

template <class T>
using DefaultNodeAllocator = memd::NodeAllocator<T>;

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s malloc|heap-single|heap-batch|list-heap|list-node SIZE K SECONDS\n", argv[0]);
    return 2;
  }
  const char* mode = argv[1];
  size_t size = std::strtoul(argv[2], nullptr, 10);
  size_t k = std::strtoul(argv[3], nullptr, 10);
  double seconds = std::atof(argv[4]);
  std::vector<void*> v(k);
  volatile unsigned char sink = 0;
  double per_s = 0;
  if (std::strcmp(mode, "malloc") == 0) {
    per_s = rate(k, seconds, [&] {
      for (size_t i = 0; i < k; ++i) {
        v[i] = std::malloc(size);
        static_cast<unsigned char*>(v[i])[0] = static_cast<unsigned char>(i);
      }
      for (size_t i = 0; i < k; ++i) sink = sink + static_cast<unsigned char*>(v[i])[0], std::free(v[i]);
    });
  } else {
    auto made = memd::Heap::create();
    if (!made.ok()) {
      std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
      return 1;
    }
    memd::Heap& heap = **made;
    if (std::strcmp(mode, "heap-single") == 0) {
      per_s = rate(k, seconds, [&] {
        for (size_t i = 0; i < k; ++i) {
          v[i] = heap.alloc(size);
          static_cast<unsigned char*>(v[i])[0] = static_cast<unsigned char>(i);
        }
        for (size_t i = 0; i < k; ++i) sink = sink + static_cast<unsigned char*>(v[i])[0], heap.free(v[i]);
      });
    } else if (std::strcmp(mode, "heap-batch") == 0) {
      per_s = rate(k, seconds, [&] {
        if (heap.alloc_batch(k, size, v.data()) != k) std::abort();
        for (size_t i = 0; i < k; ++i) static_cast<unsigned char*>(v[i])[0] = static_cast<unsigned char>(i);
        for (size_t i = 0; i < k; ++i) sink = sink + static_cast<unsigned char*>(v[i])[0];
        heap.free_batch(v.data(), k);
      });
    } else if (std::strcmp(mode, "list-heap") == 0) {
      per_s = list_rate_of_size<memd::Allocator>(heap, size, k, seconds);
    } else if (std::strcmp(mode, "list-node") == 0) {
      per_s = list_rate_of_size<DefaultNodeAllocator>(heap, size, k, seconds);
    } else {
      std::fprintf(stderr, "unknown mode %s\n", mode);
      return 2;
    }
  }
  std::printf("ns_per_object=%.2f\n", 1e9 / per_s);
  return 0;
}
