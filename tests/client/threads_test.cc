// Thread heaps: remote frees, notifications to owners, thread exit,
// abandonment and adoption.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "client/heap.h"

namespace memd {
namespace {

std::unique_ptr<Heap> NewHeap() {
  auto h = Heap::create();
  EXPECT_TRUE(h.ok()) << h.status();
  return std::move(*h);
}

void ExpectConsistent(Heap& heap) {
  absl::Status s = heap.check();
  EXPECT_TRUE(s.ok()) << s;
}

TEST(Threads, ObjectsFreedByAnotherThreadAreReusedByTheirOwner) {
  auto heap = NewHeap();
  std::vector<void*> objects;
  std::thread owner_and_back;
  // Allocate in this thread, free in another, then allocate again here.
  for (int i = 0; i < 50000; ++i) objects.push_back(heap->alloc(48 + 8 * (i % 4)));
  size_t pages = heap->stat().pages_in_use;
  std::thread([&] { for (void* p : objects) heap->free(p); }).join();
  EXPECT_EQ(heap->stat().busy_objects, 0u);
  for (int round = 0; round < 3; ++round) {
    std::vector<void*> again;
    for (int i = 0; i < 50000; ++i) again.push_back(heap->alloc(48 + 8 * (i % 4)));
    // The remote frees came back to this thread's blocks: no new pages.
    EXPECT_LE(heap->stat().pages_in_use, pages + 4);
    std::thread([&] { for (void* p : again) heap->free(p); }).join();
  }
  ExpectConsistent(*heap);
}

TEST(Threads, LargeObjectsFreedRemotelyCoalesceAtTheOwner) {
  auto heap = NewHeap();
  std::vector<void*> objects;
  for (int i = 0; i < 2000; ++i) objects.push_back(heap->alloc(600 + 13 * (i % 300)));
  size_t pages = heap->stat().pages_in_use;
  std::thread([&] { for (void* p : objects) heap->free(p); }).join();
  objects.clear();
  for (int i = 0; i < 2000; ++i) objects.push_back(heap->alloc(600 + 13 * (i % 300)));
  EXPECT_LE(heap->stat().pages_in_use, pages + 40);
  for (void* p : objects) heap->free(p);
  ExpectConsistent(*heap);
}

TEST(Threads, BlocksOfAnExitedThreadAreAdoptedAndTheirFreesReused) {
  auto heap = NewHeap();
  std::vector<void*> objects;
  std::thread([&] {
    for (int i = 0; i < 40000; ++i) objects.push_back(heap->alloc(64));
  }).join();  // the thread exits holding live objects: its blocks are abandoned
  ExpectConsistent(*heap);
  // Free half of them from here: frees into ownerless blocks.
  for (size_t i = 0; i < objects.size(); i += 2) heap->free(objects[i]);
  size_t pages = heap->stat().pages_in_use;
  // A new thread adopts the abandoned blocks before taking fresh pages.
  std::thread([&] {
    std::vector<void*> mine;
    for (int i = 0; i < 20000; ++i) mine.push_back(heap->alloc(64));
    EXPECT_LE(heap->stat().pages_in_use, pages + 2);
    for (void* p : mine) heap->free(p);
  }).join();
  for (size_t i = 1; i < objects.size(); i += 2) heap->free(objects[i]);
  heap->compact();
  EXPECT_EQ(heap->stat().busy_objects, 0u);
  EXPECT_EQ(heap->stat().pages_in_use, 0u);
  ExpectConsistent(*heap);
}

TEST(Threads, ManyShortLivedThreadsDoNotLeakSlotsOrPages) {
  HeapOptions o;
  o.max_threads = 8;  // far fewer slots than threads: slots must be reused
  auto created = Heap::create(o);
  ASSERT_TRUE(created.ok());
  Heap& heap = **created;
  for (int round = 0; round < 100; ++round) {
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        std::vector<void*> v;
        for (int i = 0; i < 500; ++i) v.push_back(heap.alloc(16 + i % 3000));
        for (void* p : v) heap.free(p);
      });
    }
    for (auto& t : threads) t.join();
  }
  heap.compact();
  EXPECT_EQ(heap.stat().busy_objects, 0u);
  EXPECT_EQ(heap.stat().pages_in_use, 0u);
  ExpectConsistent(heap);
}

TEST(Threads, ProducersAndConsumersFreeEachOthersObjects) {
  auto heap = NewHeap();
  constexpr int kPerProducer = 50000;
  std::atomic<void*> slots[64] = {};
  std::atomic<int> produced{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerProducer; ++i) {
        auto* p = static_cast<uint64_t*>(heap->alloc(16 + (i % 60) * 8));
        *p = static_cast<uint64_t>(i);
        std::atomic<void*>& slot = slots[(i + t * 7) % 64];
        void* expected = nullptr;
        while (!slot.compare_exchange_weak(expected, p)) {
          expected = nullptr;
          std::this_thread::yield();
        }
        produced.fetch_add(1);
      }
    });
  }
  std::atomic<int> consumed{0};
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      while (consumed.load() < 2 * kPerProducer) {
        for (auto& slot : slots) {
          if (void* p = slot.exchange(nullptr)) {
            heap->free(p);
            consumed.fetch_add(1);
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(heap->stat().busy_objects, 0u);
  ExpectConsistent(*heap);
}

}  // namespace
}  // namespace memd
