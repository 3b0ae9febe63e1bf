// Call-chain pools under stress (memd::Heap::set_chain_pools): threads
// allocate from fixed-size call sites, direct and through a wrapper (their
// chains get pools), and from a site of many sizes (no pool), and hand
// objects to each other to free (remote frees into the pools' blocks).
// Every object carries a pattern from its identity, checked when it is
// freed; the heap's check runs at the end. Then the layout: a site's
// objects made in a row lie one after another.
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "client/heap.h"
#include "region/chain_pools.h"

namespace memd {
namespace {

struct Obj {
  unsigned char* p;
  size_t size;
  uint64_t id;
};

unsigned char byte_of(uint64_t id, size_t i) { return static_cast<unsigned char>((id * 0x9e3779b97f4a7c15ull) >> 56 ^ i); }

// Fixed-size sites, direct and wrapped, and one of many sizes. (Bodies
// that differ: identical functions may be folded into one, one site.)
__attribute__((noinline)) void* wrapper(Heap& h, size_t n) {
  void* p = h.alloc(n);
  asm volatile("# wrapper" ::"r"(p) : "memory");
  return p;
}
__attribute__((noinline)) void* site_a(Heap& h) {
  void* p = h.alloc(24);
  asm volatile("# site_a" ::"r"(p) : "memory");
  return p;
}
__attribute__((noinline)) void* site_b(Heap& h) {
  void* p = h.alloc(48);
  asm volatile("# site_b" ::"r"(p) : "memory");
  return p;
}
__attribute__((noinline)) void* site_c(Heap& h) {
  void* p = wrapper(h, 32);
  asm volatile("# site_c" ::"r"(p) : "memory");
  return p;
}
__attribute__((noinline)) void* site_d(Heap& h) {
  void* p = wrapper(h, 32);
  asm volatile("# site_d" ::"r"(p) : "memory");
  return p;
}
__attribute__((noinline)) void* site_mixed(Heap& h, size_t n) {
  void* p = h.alloc(n);
  asm volatile("# site_mixed" ::"r"(p) : "memory");
  return p;
}

TEST(ChainPoolsStress, ObjectsStayIntactAcrossThreadsAndTheChainsArePooled) {
  auto created = Heap::create();
  ASSERT_TRUE(created.ok()) << created.status();
  Heap& heap = **created;
  heap.set_chain_pools(true);
  constexpr int kThreads = 4;
  constexpr int kOps = 200000;
  std::mutex handoff_mu;
  std::vector<Obj> handoff;
  std::atomic<uint64_t> next_id{1}, bad{0};
  auto check_and_free = [&](const Obj& o) {
    for (size_t i = 0; i < o.size; ++i) {
      if (o.p[i] != byte_of(o.id, i)) {
        bad.fetch_add(1);
        break;
      }
    }
    heap.free(o.p);
  };
  auto worker = [&](int t) {
    std::mt19937_64 rng(t + 1);
    std::vector<Obj> live;
    for (int op = 0; op < kOps; ++op) {
      uint64_t r = rng();
      if (live.size() < 2000 && r % 3 != 0) {
        Obj o{nullptr, 0, next_id.fetch_add(1)};
        switch (r >> 8 & 7) {
          case 0: case 1: o.p = static_cast<unsigned char*>(site_a(heap)); o.size = 24; break;
          case 2: o.p = static_cast<unsigned char*>(site_b(heap)); o.size = 48; break;
          case 3: o.p = static_cast<unsigned char*>(site_c(heap)); o.size = 32; break;
          case 4: o.p = static_cast<unsigned char*>(site_d(heap)); o.size = 32; break;
          default: o.size = 1 + (r >> 16) % 300; o.p = static_cast<unsigned char*>(site_mixed(heap, o.size)); break;
        }
        ASSERT_NE(o.p, nullptr);
        for (size_t i = 0; i < o.size; ++i) o.p[i] = byte_of(o.id, i);
        live.push_back(o);
      } else if (!live.empty()) {
        size_t i = (r >> 8) % live.size();
        Obj o = live[i];
        live[i] = live.back();
        live.pop_back();
        if (r >> 40 & 1) {
          std::lock_guard<std::mutex> g(handoff_mu);
          handoff.push_back(o);  // another thread frees it
        } else {
          check_and_free(o);
        }
      }
      if (op % 64 == 0) {
        std::vector<Obj> mine;
        {
          std::lock_guard<std::mutex> g(handoff_mu);
          mine.swap(handoff);
        }
        for (const Obj& o : mine) check_and_free(o);
      }
    }
    for (const Obj& o : live) check_and_free(o);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (auto& th : threads) th.join();
  for (const Obj& o : handoff) check_and_free(o);
  EXPECT_EQ(bad.load(), 0u) << "objects overwritten";
  absl::Status s = heap.check();
  EXPECT_TRUE(s.ok()) << s;
  region::ChainPoolStats st = region::chain_pool_stats();
  EXPECT_GE(st.pooled, 4u) << "sites a, b and the wrapper's two callers";
  EXPECT_GE(st.lengthened, 1u) << "the wrapper";
  EXPECT_GE(st.mixed, 1u) << "the site of many sizes";

  // The layout, on the stressed heap: a pooled site's objects never lie
  // beside the plain site's of the same size (they are in other blocks), and
  // on a fresh heap they lie one after another.
  auto layout = [](Heap& h, int* adjacent, int* beside_other) {
    std::vector<char*> a, mixed;
    for (int i = 0; i < 1000; ++i) {
      a.push_back(static_cast<char*>(site_a(h)));
      mixed.push_back(static_cast<char*>(site_mixed(h, 24)));
    }
    std::set<char*> others(mixed.begin(), mixed.end());
    *adjacent = *beside_other = 0;
    const auto stride = static_cast<ptrdiff_t>(h.size(a[0]));  // 24 bytes: the 32-byte class
    for (size_t i = 0; i < a.size(); ++i) {
      *adjacent += i > 0 && a[i] - a[i - 1] == stride;
      // Beside: in the same block. The last object of a block whose class
      // fills it exactly (32 bytes) lies against the next page's first.
      auto same_page = [&](char* q) { return (reinterpret_cast<uintptr_t>(q) ^ reinterpret_cast<uintptr_t>(a[i])) < 4096; };
      *beside_other += (others.count(a[i] + stride) && same_page(a[i] + stride)) +
                           (others.count(a[i] - stride) && same_page(a[i] - stride)) >
                       0;
    }
    for (char* p : a) h.free(p);
    for (char* p : mixed) h.free(p);
  };
  int adjacent, beside_other;
  layout(heap, &adjacent, &beside_other);
  EXPECT_LT(beside_other, 10) << "a pooled object beside a plain one of its size";
  auto fresh = Heap::create();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  (*fresh)->set_chain_pools(true);
  layout(**fresh, &adjacent, &beside_other);
  EXPECT_GT(adjacent, 900);
  EXPECT_LT(beside_other, 10);
}

}  // namespace
}  // namespace memd
