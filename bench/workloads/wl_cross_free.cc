// wl_cross_free: threads that free each other's small objects, as the
// threads of a server do when a request is parsed on one thread and answered
// on another.
//
// T threads stand in a ring; thread i allocates 10–100 B objects and passes
// them, 32 at a time, to thread i+1, which checks and frees each. With two
// threads, each frees every object the other allocates. Every free is a
// remote free of a small object, the path a thread cache makes slow if it has
// to lock or send the object back to its owner one by one.
//
// The work runs in generations: at the end of one, every thread exits and a
// new set starts; the rings keep a backlog of objects in flight, so each new
// thread first frees objects allocated by threads that have exited (main
// allocates the first backlog).
#include <algorithm>
#include <atomic>
#include <deque>
#include <thread>
#include <vector>

#include "common.h"
#include "spsc_ring.h"

namespace {

constexpr size_t kRingSlots = 4096;
constexpr size_t kBatch = 32;                     // objects handed over at once
constexpr size_t kBacklog = 1024;                  // objects in flight per ring between generations
constexpr uint64_t kObjectsPerGeneration = 300'000;  // each thread allocates (and frees) this many
constexpr uint64_t kGenerations = 10;              // at scale 1
constexpr size_t kMinSize = 10;
constexpr size_t kMaxSize = 100;

// An object carries its own tag and size, so the thread that frees it can
// check it without a side table. Byte 8 holds the size; the rest repeats the
// tag's low byte (wl::fill).
void* make(wl::Rng& rng, uint64_t& sum) {
  size_t size = rng.range(kMinSize, kMaxSize);
  uint64_t tag = rng.next();
  auto* p = static_cast<unsigned char*>(wl::xmalloc(size));
  wl::fill(p, size, tag);
  p[8] = static_cast<unsigned char>(size);
  sum += tag;
  return p;
}

void check_and_free(void* obj, uint64_t& sum) {
  auto* p = static_cast<unsigned char*>(obj);
  uint64_t tag = wl::read_tag(p, 8);
  size_t size = p[8];
  if (size < kMinSize || size > kMaxSize || p[size - 1] != static_cast<unsigned char>(tag)) {
    wl::die("object corrupted in flight");
  }
  sum += tag;
  std::free(p);
}

struct Totals {
  std::atomic<uint64_t> made{0};
  std::atomic<uint64_t> freed{0};
};

// Allocates `count` objects into `out` and frees `count` from `in`, a batch
// at a time, whichever can progress; neither side can block the other for
// good, because each ring holds fewer objects than its capacity.
void run(SpscRing& in, SpscRing& out, uint64_t seed, uint64_t count, Totals& totals) {
  wl::Rng rng(seed);
  uint64_t made = 0, freed = 0, made_sum = 0, freed_sum = 0;
  void* batch[kBatch];
  size_t batched = 0;
  void* got[kBatch];
  while (made < count || freed < count) {
    bool progressed = false;
    if (made < count) {
      if (batched == 0) {
        batched = static_cast<size_t>(std::min<uint64_t>(kBatch, count - made));
        for (size_t i = 0; i < batched; ++i) batch[i] = make(rng, made_sum);
      }
      if (out.push_all(batch, batched)) {
        made += batched;
        batched = 0;
        progressed = true;
      }
    }
    if (freed < count) {
      size_t n = in.pop_some(got, static_cast<size_t>(std::min<uint64_t>(kBatch, count - freed)));
      for (size_t i = 0; i < n; ++i) check_and_free(got[i], freed_sum);
      freed += n;
      progressed |= n > 0;
    }
    if (!progressed) std::this_thread::yield();
  }
  totals.made.fetch_add(made_sum);
  totals.freed.fetch_add(freed_sum);
}

}  // namespace

int main(int argc, char** argv) {
  wl::Args args = wl::parse_args(argc, argv, 2, true);
  if (args.threads < 2) wl::die("needs at least 2 threads (objects go to another thread)");
  uint64_t generations = wl::scaled(kGenerations, args.scale);
  size_t n = static_cast<size_t>(args.threads);

  // rings[i] carries objects from thread i to thread i+1.
  std::deque<SpscRing> rings;  // a deque: rings cannot move
  for (size_t i = 0; i < n; ++i) rings.emplace_back(kRingSlots);

  Totals totals;
  uint64_t main_sum = 0;
  wl::Rng rng(0xC805);
  for (SpscRing& r : rings) {
    for (size_t k = 0; k < kBacklog; ++k) {
      void* obj = make(rng, main_sum);
      r.push_all(&obj, 1);
    }
  }
  totals.made += main_sum;

  for (uint64_t g = 0; g < generations; ++g) {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < n; ++i) {
      uint64_t seed = 0xF8EE0000ull + g * 1000 + i;
      threads.emplace_back(run, std::ref(rings[(i + n - 1) % n]), std::ref(rings[i]), seed, kObjectsPerGeneration,
                           std::ref(totals));
    }
    for (auto& t : threads) t.join();
  }

  uint64_t leftover_sum = 0;
  for (SpscRing& r : rings) {
    void* obj;
    while (r.pop_some(&obj, 1) == 1) check_and_free(obj, leftover_sum);
  }
  totals.freed += leftover_sum;
  if (totals.made.load() != totals.freed.load()) wl::die("threads freed different objects than were allocated");

  // Not counted as it happens (that would put a shared counter on every
  // object): an upper bound, every ring full of the largest objects, plus the
  // rings themselves. Live data is under 1 MiB either way, so compare peak
  // RSS here, not fragmentation.
  size_t peak = n * (kRingSlots * (kMaxSize + sizeof(void*)) + kMaxSize);
  wl::report(totals.freed.load() ^ (generations * n), peak);
  return 0;
}
