// What wl_cache_thrash and wl_cache_scratch share: threads that each hammer
// one small object of their own. If the allocator has placed two threads'
// objects in one cache line, every write by one thread invalidates the other's
// copy of the line (false sharing) and the writes run many times slower; the
// time column shows it. The workloads after the Hoard benchmarks of the same
// names (Berger et al., ASPLOS 2000), written anew from their description.
#pragma once

#include <atomic>
#include <thread>
#include <vector>

#include "common.h"

namespace wl {

constexpr size_t kSharingObjectSize = 8;

// Writes every byte of `p` `repetitions` times, through a volatile pointer so
// each write reaches the cache. Returns the bytes' final sum.
inline uint64_t hammer(void* p, uint64_t repetitions, uint64_t seed) {
  auto* b = static_cast<volatile unsigned char*>(p);
  for (size_t i = 0; i < kSharingObjectSize; ++i) b[i] = static_cast<unsigned char>(seed + i);
  for (uint64_t r = 0; r < repetitions; ++r) {
    for (size_t i = 0; i < kSharingObjectSize; ++i) b[i] = static_cast<unsigned char>(b[i] + 1);
  }
  uint64_t sum = 0;
  for (size_t i = 0; i < kSharingObjectSize; ++i) sum += b[i];
  return sum;
}

// Starts `threads` threads running body(t) at the same moment, so that their
// allocations interleave as much as the allocator lets them. Returns the sum
// of what they return, in thread order (deterministic).
template <class Body>
uint64_t run_together(int threads, Body body) {
  std::atomic<int> ready{0};
  std::vector<uint64_t> results(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < threads) std::this_thread::yield();
      results[t] = body(t);
    });
  }
  for (auto& th : pool) th.join();
  uint64_t h = 0;
  for (uint64_t r : results) h = mix(h, r);
  return h;
}

}  // namespace wl
