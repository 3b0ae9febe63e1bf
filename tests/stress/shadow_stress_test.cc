// A randomized stress test against a shadow model. Threads allocate, free,
// resize and hand objects to each other (so frees cross threads); every
// object carries a pattern derived from its identity, checked whenever it is
// resized or freed. Overlapping objects would overwrite each other's
// patterns; a lost realloc would lose its contents; a short usable size or a
// missed alignment is checked directly. The heap's own check runs at the end.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "client/heap.h"

namespace memd {
namespace {

struct Shadow {
  unsigned char* p;
  size_t size;
  uint64_t id;
};

unsigned char pattern_byte(uint64_t id, size_t i) {
  return static_cast<unsigned char>((id * 0x9e3779b97f4a7c15ull + i * 0x2545f491ull) >> 56);
}

// Fills (or verifies) the pattern: every byte of small objects, a sample of
// large ones (the head, the tail and a stride through the middle).
template <class F>
void for_pattern_positions(size_t size, F f) {
  if (size <= 1024) {
    for (size_t i = 0; i < size; ++i) f(i);
    return;
  }
  for (size_t i = 0; i < 256; ++i) f(i);
  for (size_t i = size - 256; i < size; ++i) f(i);
  for (size_t i = 256; i < size - 256; i += 509) f(i);
}

void fill(const Shadow& s) {
  for_pattern_positions(s.size, [&](size_t i) { s.p[i] = pattern_byte(s.id, i); });
}

// Whether the pattern written for an object of `filled` bytes still stands
// in its first `upto` bytes.
bool intact(const Shadow& s, size_t filled, size_t upto) {
  bool ok = true;
  for_pattern_positions(filled, [&](size_t i) { ok &= i >= upto || s.p[i] == pattern_byte(s.id, i); });
  return ok;
}

// Per-mille shares of requests by the default boundaries: small (to 128 B),
// medium (the classes 16 bytes apart to 512 B), mid (the classes four per doubling,
// to 16 KiB), large (to 32 KiB); the rest are huge, half of them of a few
// sizes close together (what a thread's huge-run cache reuses), half spread
// to 1 MiB.
// With phase_ops, every request is small and comes from one class
// of 64-112 B (one-page blocks) that changes every phase_ops operations: a
// size's blocks empty while the next size asks for blocks of the same
// length, which the thread's lookaside of empty blocks hands over.
struct SizeMix {
  int small, medium, mid, large;
  long phase_ops = 0;
};
constexpr SizeMix kMixed{600, 150, 150, 50};
constexpr SizeMix kLargeHeavy{100, 50, 50, 750};
constexpr SizeMix kHugeHeavy{100, 50, 50, 50};
constexpr SizeMix kSmallPhases{1000, 0, 0, 0, 2000};

size_t random_size(std::mt19937_64& rng, const SizeMix& mix, long op) {
  if (mix.phase_ops > 0) return 49 + 16 * static_cast<size_t>((op / mix.phase_ops) % 4) + rng() % 16;
  uint64_t r = rng() % 1000;
  if (r < uint64_t(mix.small)) return rng() % 129;
  if (r < uint64_t(mix.small + mix.medium)) return 128 + rng() % 385;
  if (r < uint64_t(mix.small + mix.medium + mix.mid)) return 513 + rng() % (16384 - 512);
  if (r < uint64_t(mix.small + mix.medium + mix.mid + mix.large)) return 16385 + rng() % 16384;
  if (rng() % 2 == 0) return 32769 + (rng() % 4) * 20000 + rng() % 9000;
  return 32769 + rng() % (1 << 20);
}

struct Inbox {
  std::mutex lock;
  std::vector<Shadow> objects;
};

long ops_per_thread() {
  if (const char* v = std::getenv("MEMD_STRESS_OPS")) return std::atol(v);
#if defined(MEMD_SANITIZER_THREAD) || defined(MEMD_SANITIZER_ADDRESS)
  return 150000;
#else
  return 1000000;
#endif
}

// The heap's statistics after the run go to *after (if given).
void run_stress(const SizeMix& mix, long ops, HeapStats* after = nullptr) {
  auto created = Heap::create();
  ASSERT_TRUE(created.ok());
  Heap& heap = **created;
  const int kThreads = std::getenv("MEMD_STRESS_THREADS") ? std::atoi(std::getenv("MEMD_STRESS_THREADS")) : 4;
  const long kOps = ops;
  std::vector<Inbox> inboxes(kThreads);
  std::atomic<uint64_t> next_id{1};
  std::atomic<long> failures{0};
  constexpr int kGenerations = 4;

  auto run_ops = [&](int t, int generation, std::mt19937_64& rng, std::vector<Shadow>& live) {
    auto fail = [&](const char* what, const Shadow& s) {
      if (failures.fetch_add(1) < 10) ADD_FAILURE() << what << " id " << s.id << " size " << s.size;
    };
    auto release = [&](Shadow s) {
      if (!intact(s, s.size, s.size)) fail("pattern broken at free", s);
      heap.free(s.p);
    };
    for (long op = generation * kOps / kGenerations; op < (generation + 1) * kOps / kGenerations; ++op) {
      uint64_t r = rng() % 100;
      if (r < 45 || live.empty()) {
        Shadow s{nullptr, random_size(rng, mix, op), next_id.fetch_add(1)};
        size_t align = rng() % 20 == 0 ? size_t{1} << (3 + rng() % 10) : 0;
        bool zero = align == 0 && rng() % 10 == 0;
        s.p = static_cast<unsigned char*>(align ? heap.alloc_aligned(s.size, align)
                                                : zero ? heap.alloc_zeroed(s.size) : heap.alloc(s.size));
        if (s.p == nullptr) { fail("allocation failed", s); continue; }
        if (align && reinterpret_cast<uintptr_t>(s.p) % align) fail("misaligned", s);
        if (heap.size(s.p) < s.size) fail("usable size short", s);
        if (zero) {
          for (size_t i = 0; i < std::min<size_t>(s.size, 4096); ++i) {
            if (s.p[i]) { fail("calloc memory not zero", s); break; }
          }
        }
        fill(s);
        live.push_back(s);
      } else if (r < 80) {
        size_t i = rng() % live.size();
        release(live[i]);
        live[i] = live.back();
        live.pop_back();
      } else if (r < 90) {
        size_t i = rng() % live.size();
        Shadow& s = live[i];
        size_t new_size = std::max<size_t>(1, random_size(rng, mix, op));  // resize(p, 0) frees
        if (!intact(s, s.size, s.size)) fail("pattern broken before resize", s);
        auto* q = static_cast<unsigned char*>(heap.resize(s.p, new_size));
        if (q == nullptr) { fail("resize failed", s); continue; }
        Shadow moved{q, new_size, s.id};
        if (!intact(moved, s.size, new_size)) fail("contents lost by resize", s);
        s = moved;
        if (heap.size(s.p) < s.size) fail("usable size short after resize", s);
        fill(s);
      } else {
        // Hand an object to another thread, which frees it: a remote free.
        size_t i = rng() % live.size();
        if (kThreads == 1) continue;
        Inbox& to = inboxes[(t + 1 + rng() % (kThreads - 1)) % kThreads];
        std::lock_guard<std::mutex> g(to.lock);
        to.objects.push_back(live[i]);
        live[i] = live.back();
        live.pop_back();
      }
      if (op % 64 == 0) {
        std::vector<Shadow> got;
        {
          std::lock_guard<std::mutex> g(inboxes[t].lock);
          got.swap(inboxes[t].objects);
        }
        for (const Shadow& s : got) release(s);
      }
    }
  };

  // A logical worker runs its operations in kGenerations threads, one after
  // the other, carrying its live objects over: each thread's exit abandons
  // its blocks while the other workers keep allocating and freeing, and the
  // next thread frees what the dead one allocated.
  auto worker = [&](int t) {
    std::mt19937_64 rng(1000 + t);
    std::vector<Shadow> live;
    for (int g = 0; g < kGenerations; ++g) {
      std::thread([&, g] { run_ops(t, g, rng, live); }).join();
    }
    for (const Shadow& s : live) {
      if (!intact(s, s.size, s.size) && failures.fetch_add(1) < 10) ADD_FAILURE() << "pattern broken at exit";
      heap.free(s.p);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (auto& th : threads) th.join();
  for (Inbox& in : inboxes) {
    for (const Shadow& s : in.objects) {
      EXPECT_TRUE(intact(s, s.size, s.size));
      heap.free(s.p);
    }
  }
  EXPECT_EQ(failures.load(), 0);
  absl::Status check = heap.check();
  EXPECT_TRUE(check.ok()) << check;
  heap.compact();
  HeapStats st = heap.stat();
  if (after != nullptr) *after = st;
  EXPECT_EQ(st.busy_objects, 0u);
  EXPECT_EQ(st.pages_in_use, 0u);
}

TEST(ShadowStress, RandomOperationsAcrossThreadsKeepEveryObjectIntact) {
  run_stress(kMixed, ops_per_thread());
}

// Mostly large objects, whose heap is torn down with every thread exit while
// the other threads go on allocating from pages the exiting one gives back.
TEST(ShadowStress, LargeObjectsAcrossThreadExitsStayIntact) {
  run_stress(kLargeHeavy, ops_per_thread() / 4);
}

// Small objects in phases of one size each (see SizeMix): empty blocks of
// one size go to the next through the thread's lookaside, while other
// threads still free objects into them and threads exit with blocks kept.
TEST(ShadowStress, SmallSizesInPhasesReuseEachOthersEmptyBlocks) {
  run_stress(kSmallPhases, ops_per_thread() / 2);
}

// Mostly huge runs, freed by whichever thread holds them: each lands in the
// freeing thread's huge-run cache and is handed out again, whole or for a
// slightly smaller request, by that thread; the caches go back at exit.
// Resizes that cannot grow in place move the pages of the bigger ones.
TEST(ShadowStress, HugeRunsReusedAcrossThreadsStayIntact) {
  HeapStats st;
  run_stress(kHugeHeavy, ops_per_thread() / 8, &st);
  EXPECT_GT(st.pages_moved, 0u) << "no resize moved pages: the remapping path went untested";
}

}  // namespace
}  // namespace memd
