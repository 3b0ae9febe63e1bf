// Kept thread heaps (ThreadHeapPool::set_kept_heaps): the heap of a thread
// that exits passes whole to the next thread that attaches, so that thread
// owns the blocks its predecessor allocated from and frees into them
// locally; remote frees that arrived meanwhile are collected by the new
// owner; past the limit, heaps are abandoned as before; and a kept heap is
// no leak: the region checks clean, and clear() and a reset of the arena
// free what it holds. Each "thread" is a real one.
#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

#include "heap/layout.h"
#include "heap/remote_free.h"
#include "heap/thread_heap.h"
#include "region/arena.h"

namespace memd::region {
namespace {

struct ArenaDeleter {
  void operator()(Arena* a) const { Arena::destroy(a); }
};
using ArenaPtr = std::unique_ptr<Arena, ArenaDeleter>;

ArenaPtr make_arena(uint32_t kept) {
  ArenaOptions o;
  o.reserve_bytes = size_t{1} << 30;
  o.max_threads = 16;
  o.kept_heaps = kept;
  return ArenaPtr(Arena::create(o));
}

// The owner id of the block holding p.
heap::OwnerId owner_of_object(const Arena& a, const void* p) {
  const heap::Region& r = a.region();
  heap::PageIndex page{static_cast<uint32_t>(r.offset_of(p) >> heap::kPageShift)};
  heap::PageDesc d = r.page(page);
  return heap::owner_of(r.block(heap::PageIndex{d.block}).owner_word.load());
}

void expect_clean(Arena& a) {
  char message[256] = {};
  EXPECT_TRUE(a.check(message, sizeof message)) << message;
}

// Runs fn(heap) on a new thread attached to the arena, then detaches it.
template <class Fn>
heap::OwnerId on_new_thread(Arena& a, Fn fn) {
  heap::OwnerId id = heap::kNoOwner;
  std::thread t([&] {
    heap::ThreadHeap* h = a.attach_thread();
    ASSERT_NE(h, nullptr);
    id = h->id();
    fn(*h);
    a.detach_thread(h);
  });
  t.join();
  return id;
}

TEST(KeptHeaps, TheNextThreadOwnsWhatTheLastOneAllocated) {
  ArenaPtr a = make_arena(1);
  ASSERT_NE(a, nullptr);
  std::vector<void*> objects;
  heap::OwnerId first = on_new_thread(*a, [&](heap::ThreadHeap& h) {
    for (int i = 0; i < 2000; ++i) objects.push_back(h.alloc(16 + i % 200));
  });
  ASSERT_NE(first, heap::kNoOwner);
  heap::OwnerId second = on_new_thread(*a, [&](heap::ThreadHeap& h) {
    for (void* p : objects) {
      ASSERT_NE(p, nullptr);
      // Still the first thread's blocks, and now this thread's: a local free.
      EXPECT_EQ(owner_of_object(*a, p), h.id());
      EXPECT_EQ(h.free(p), heap::FreeStatus::kOk);
    }
  });
  EXPECT_EQ(second, first);
  EXPECT_EQ(a->stat().busy_objects, 0u);
  expect_clean(*a);
}

TEST(KeptHeaps, RemoteFreesIntoAKeptHeapAreCollectedByItsNextThread) {
  ArenaPtr a = make_arena(1);
  ASSERT_NE(a, nullptr);
  // This thread's own heap, attached first (a thread attaching later would
  // take the kept one).
  heap::ThreadHeap* main_heap = a->attach_thread();
  ASSERT_NE(main_heap, nullptr);
  std::vector<void*> objects;
  heap::OwnerId first = on_new_thread(*a, [&](heap::ThreadHeap& h) {
    for (int i = 0; i < 3000; ++i) objects.push_back(h.alloc(48));
  });
  uint64_t blocks_before = a->stat().segregated_blocks;
  // Freed by a thread that does not own them, while their heap is kept.
  std::set<void*> freed;
  EXPECT_EQ(on_new_thread(*a, [&](heap::ThreadHeap&) {}), first);  // takes the kept heap and leaves it again
  for (void* p : objects) {
    ASSERT_EQ(main_heap->free(p), heap::FreeStatus::kOk);
    freed.insert(p);
  }
  // The next thread allocates from the kept heap's blocks: the remote frees
  // come back to it as the same addresses (after the room its current
  // block had never used), and it needs no new block.
  size_t reused = 0;
  std::vector<void*> again;
  EXPECT_NE(main_heap->id(), first);
  heap::OwnerId third = on_new_thread(*a, [&](heap::ThreadHeap& h) {
    for (size_t i = 0; i < objects.size(); ++i) {
      void* p = h.alloc(48);
      ASSERT_NE(p, nullptr);
      reused += freed.count(p);
      again.push_back(p);
    }
  });
  EXPECT_EQ(third, first);
  EXPECT_EQ(a->stat().segregated_blocks, blocks_before);
  EXPECT_GT(reused, objects.size() / 2);
  for (void* p : again) EXPECT_EQ(main_heap->free(p), heap::FreeStatus::kOk);
  a->detach_thread(main_heap);
  expect_clean(*a);
}

TEST(KeptHeaps, PastTheLimitHeapsAreAbandoned) {
  constexpr uint32_t kKept = 2;
  ArenaPtr a = make_arena(kKept);
  ASSERT_NE(a, nullptr);
  // Four threads hold heaps at once, then all leave: two are kept, two
  // abandoned (their blocks go to the page heap's abandoned lists).
  std::vector<heap::ThreadHeap*> heaps;
  for (int i = 0; i < 4; ++i) {
    heaps.push_back(a->attach_thread());
    ASSERT_NE(heaps.back(), nullptr);
    for (int j = 0; j < 100; ++j) ASSERT_NE(heaps.back()->alloc(32), nullptr);
  }
  std::set<heap::OwnerId> ids;
  for (heap::ThreadHeap* h : heaps) ids.insert(h->id());
  for (heap::ThreadHeap* h : heaps) a->detach_thread(h);
  auto in_use = [&] {
    int n = 0;
    for (uint32_t s = 0; s < a->region().max_owners; ++s) n += a->region().slots[s].in_use.load() != 0;
    return n;
  };
  EXPECT_EQ(in_use(), static_cast<int>(kKept));
  // The next two threads get kept heaps back, the third a fresh one.
  heap::ThreadHeap* x = a->attach_thread();
  heap::ThreadHeap* y = a->attach_thread();
  heap::ThreadHeap* z = a->attach_thread();
  ASSERT_TRUE(x != nullptr && y != nullptr && z != nullptr);
  EXPECT_EQ(ids.count(x->id()), 1u);
  EXPECT_EQ(ids.count(y->id()), 1u);
  EXPECT_NE(x->id(), y->id());
  EXPECT_EQ(ids.count(z->id()), 0u) << "a new generation of a freed slot, not a kept heap";
  for (heap::ThreadHeap* h : {x, y, z}) a->detach_thread(h);
  expect_clean(*a);
  // Every object is still live (nothing freed them), in kept or abandoned blocks.
  EXPECT_EQ(a->stat().busy_objects, 400u);
}

TEST(KeptHeaps, ClearFreesWhatKeptHeapsHold) {
  ArenaPtr a = make_arena(4);
  ASSERT_NE(a, nullptr);
  for (int t = 0; t < 3; ++t) {
    (void)on_new_thread(*a, [](heap::ThreadHeap& h) {
      for (int i = 0; i < 500; ++i) ASSERT_NE(h.alloc(16 + i % 3000), nullptr);
    });
  }
  EXPECT_EQ(a->stat().busy_objects, 1500u);
  a->clear();
  EXPECT_EQ(a->stat().busy_objects, 0u);
  expect_clean(*a);
  // And the kept heap still works after the reset.
  (void)on_new_thread(*a, [](heap::ThreadHeap& h) {
    void* p = h.alloc(64);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(h.free(p), heap::FreeStatus::kOk);
  });
  expect_clean(*a);
}

TEST(KeptHeaps, ManyThreadsComingAndGoingKeepTheHeapConsistent) {
  ArenaPtr a = make_arena(3);
  ASSERT_NE(a, nullptr);
  // Chains of short-lived threads, as in a server: each frees a random half
  // of what the chain holds and allocates anew.
  constexpr int kChains = 4, kGenerations = 40, kSlots = 500;
  std::vector<std::vector<void*>> held(kChains, std::vector<void*>(kSlots, nullptr));
  for (int g = 0; g < kGenerations; ++g) {
    std::vector<std::thread> threads;
    for (int c = 0; c < kChains; ++c) {
      threads.emplace_back([&, c, g] {
        heap::ThreadHeap* h = a->attach_thread();
        ASSERT_NE(h, nullptr);
        uint64_t x = static_cast<uint64_t>(g * kChains + c) * 0x9e3779b97f4a7c15ull + 1;
        for (int i = 0; i < kSlots; ++i) {
          x ^= x << 13, x ^= x >> 7, x ^= x << 17;
          void*& slot = held[c][x % kSlots];
          if (slot != nullptr) {
            ASSERT_EQ(h->free(slot), heap::FreeStatus::kOk);
          }
          slot = h->alloc(8 + x % 700);
          ASSERT_NE(slot, nullptr);
        }
        a->detach_thread(h);
      });
    }
    for (std::thread& t : threads) t.join();
  }
  uint64_t live = 0;
  for (auto& chain : held) {
    for (void* p : chain) live += p != nullptr;
  }
  EXPECT_EQ(a->stat().busy_objects, live);
  expect_clean(*a);
}

}  // namespace
}  // namespace memd::region
