// memd::Heap::alloc_batch and free_batch, and their C names: a batch is
// what the same number of single calls would give (distinct objects of
// at least the size, counted alike, any thread may free them), it stops
// cleanly when memory runs out, and bad entries of a free batch are
// reported and skipped.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "client/heap.h"
#include "client/memd.h"
#include "heap/sampling.h"
#include "heap_fixture.h"
#include "heap/size_class.h"
#include "region/diag.h"

namespace memd {
namespace {

class BatchTest : public testing::HeapFixture {
 protected:
  // Objects are distinct, non-overlapping and at least `size` long; each
  // is filled with its index.
  void ExpectDisjoint(const std::vector<void*>& v, size_t size) {
    std::set<std::pair<uintptr_t, uintptr_t>> ranges;
    for (size_t i = 0; i < v.size(); ++i) {
      ASSERT_NE(v[i], nullptr) << i;
      size_t n = heap_->size(v[i]);
      ASSERT_GE(n, size) << i;
      auto lo = reinterpret_cast<uintptr_t>(v[i]);
      auto it = ranges.lower_bound({lo, 0});
      if (it != ranges.end()) {
        ASSERT_GE(it->first, lo + n) << i;
      }
      if (it != ranges.begin()) {
        ASSERT_LE(std::prev(it)->second, lo) << i;
      }
      ranges.insert({lo, lo + n});
      std::memset(v[i], static_cast<int>(i & 0xff), size);
    }
    for (size_t i = 0; i < v.size(); ++i) {
      auto* c = static_cast<unsigned char*>(v[i]);
      for (size_t b = 0; b < size; ++b) ASSERT_EQ(c[b], static_cast<unsigned char>(i & 0xff)) << i;
    }
  }
};

TEST_F(BatchTest, ABatchGivesDistinctObjectsOfEverySize) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{8}, size_t{24}, size_t{100}, size_t{496}, size_t{1000},
                      size_t{4096}, size_t{20000}, size_t{100000}, size_t{1} << 20}) {
    size_t n = size >= (size_t{1} << 20) ? 8 : 3000;
    std::vector<void*> v(n, nullptr);
    ASSERT_EQ(heap_->alloc_batch(n, size, v.data()), n) << size;
    ExpectDisjoint(v, size);
    heap_->free_batch(v.data(), v.size());
    ExpectConsistent();
  }
  EXPECT_EQ(heap_->stat().busy_objects, 0u);
}

TEST_F(BatchTest, BatchesAndSingleCallsMixAndCountAlike) {
  heap::CounterSnapshot before = heap_->counters();
  std::vector<void*> v(1000, nullptr);
  // Half the block's objects freed singly, in between: the batch takes the
  // free list first, then bump space and fresh blocks.
  std::vector<void*> singles;
  for (int i = 0; i < 500; ++i) singles.push_back(heap_->alloc(48));
  for (size_t i = 0; i < singles.size(); i += 2) heap_->free(singles[i]);
  ASSERT_EQ(heap_->alloc_batch(v.size(), 48, v.data()), v.size());
  for (size_t i = 1; i < singles.size(); i += 2) v.push_back(singles[i]);
  ExpectDisjoint(v, 48);
  heap::CounterSnapshot after = heap_->counters();
  uint32_t slot = heap::SizeClasses::class_of(48);  // a snapshot has a slot per class
  EXPECT_EQ(after.classes[slot].allocs - before.classes[slot].allocs, 1500u);
  heap_->free_batch(v.data(), v.size());
  after = heap_->counters();
  EXPECT_EQ(after.classes[slot].frees - before.classes[slot].frees, 1500u);
  ExpectConsistent();
}

TEST_F(BatchTest, BatchesPastTheSamplingCountdownAreStillWhole) {
  // Enough bytes that the countdown runs out many times within the batches.
  size_t n = 4 * heap::kSamplingProbeBytes / 64 + 17;
  std::vector<void*> v(n, nullptr);
  ASSERT_EQ(heap_->alloc_batch(n, 64, v.data()), n);
  ExpectDisjoint(v, 64);
  heap_->free_batch(v.data(), v.size());
  ExpectConsistent();
}

TEST_F(BatchTest, AnotherThreadFreesABatch) {
  std::vector<void*> v(5000, nullptr);
  std::thread t([&] { ASSERT_EQ(heap_->alloc_batch(v.size(), 72, v.data()), v.size()); });
  t.join();
  ExpectDisjoint(v, 72);
  heap_->free_batch(v.data(), v.size());
  // The freeing thread's batch reuses what the other thread's blocks held.
  ASSERT_EQ(heap_->alloc_batch(v.size(), 72, v.data()), v.size());
  ExpectDisjoint(v, 72);
  heap_->free_batch(v.data(), v.size());
  ExpectConsistent();
}

TEST_F(BatchTest, ABatchStopsCleanlyWhenMemoryRunsOut) {
  HeapOptions o;
  o.reserve_bytes = size_t{32} << 20;
  auto small = Heap::create(o);
  ASSERT_TRUE(small.ok()) << small.status();
  std::vector<void*> v(size_t{1} << 20, nullptr);
  errno = 0;
  size_t got = (*small)->alloc_batch(v.size(), 100, v.data());
  EXPECT_LT(got, v.size());
  EXPECT_GT(got, 1000u);
  EXPECT_EQ(errno, ENOMEM);
  for (size_t i = got; i < v.size(); ++i) ASSERT_EQ(v[i], nullptr) << i;
  (*small)->free_batch(v.data(), got);
  EXPECT_TRUE((*small)->check().ok());
  EXPECT_EQ((*small)->alloc_batch(got, 100, v.data()), got);  // all of it is back
  (*small)->free_batch(v.data(), got);
}

TEST_F(BatchTest, BadEntriesOfAFreeBatchAreReportedAndSkipped) {
  unsigned long errors = region::error_count();
  std::vector<void*> v(64, nullptr);
  ASSERT_EQ(heap_->alloc_batch(v.size(), 32, v.data()), v.size());
  int on_stack;
  std::vector<void*> batch = v;
  batch.push_back(nullptr);    // skipped, not an error
  batch.push_back(&on_stack);  // not the heap's
  batch.push_back(v[3]);       // a double free within the batch
  heap_->free_batch(batch.data(), batch.size());
  EXPECT_EQ(region::error_count(), errors + 2);
  EXPECT_EQ(heap_->stat().busy_objects, 0u);
  EXPECT_EQ(heap_->alloc_batch(4, 32, nullptr), 0u);
  EXPECT_EQ(errno, EINVAL);
  ExpectConsistent();
}

TEST_F(BatchTest, TheCNamesAreTheSameCalls) {
  auto* h = reinterpret_cast<memd_heap*>(heap_.get());
  void* out[300] = {};
  ASSERT_EQ(memd_alloc_batch(h, 300, 40, out), 300u);
  std::vector<void*> v(out, out + 300);
  ExpectDisjoint(v, 40);
  memd_free_batch(h, out, 300);
  EXPECT_EQ(heap_->stat().busy_objects, 0u);
  errno = 0;
  EXPECT_EQ(memd_alloc_batch(h, 3, 40, nullptr), 0u);
  EXPECT_EQ(errno, EINVAL);
  ExpectConsistent();
}

}  // namespace
}  // namespace memd
