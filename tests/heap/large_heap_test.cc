// The large-object heap alone: best fit, splitting, coalescing, the quick
// cache, alignment and bad frees. Blocks come from a real page heap.
#include "heap/large_heap.h"

#include <gtest/gtest.h>

#include <cstring>
#include <new>
#include <vector>

#include "disciplines/anonymous.h"
#include "heap/page_heap.h"
#include "heap/region_format.h"

namespace memd::heap {
namespace {

// Hands out large blocks straight from a page heap (one thread, no lock).
class PageHeapBlocks final : public BlockSource {
 public:
  PageHeapBlocks(const Region& r, MemorySource& s) : r_(r), s_(s) {}
  AcquiredBlock acquire(PageKind kind, uint16_t, OwnerId) override {
    RunAllocation run = page_heap_alloc(r_, s_, PageCount{r_.header->params.large_block_pages}, kind, 0);
    ++acquired;
    return {run.first, run.zeroed, false};
  }
  void release(PageIndex block) override { page_heap_free(r_, block, r_.block(block).pages, 0); }
  void abandon(PageIndex) override {}
  AcquiredBlock acquire_huge(PageCount, PageCount) override { return {}; }
  void release_huge(PageIndex) override {}
  bool resize_huge(PageIndex, PageCount, bool*) override { return false; }
  int acquired = 0;

 private:
  const Region& r_;
  MemorySource& s_;
};

class LargeHeapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(source_.reserve(size_t{256} << 20));
    // The paper's boundaries, so that the large heap serves everything from
    // 497 bytes up, the whole range it can be given.
    HeapParams params;
    params.medium_max = 496;
    params.large_max = 32768;
    ASSERT_TRUE(region_format(source_, params, 16, 0x5eed));
    r_ = Region::attach(source_.base());
    heap_.init(r_, 32768, 20, 0x5eed);
  }
  void* Alloc(size_t n, size_t align = 16) {
    bool zeroed;
    void* p = heap_.alloc(blocks_, 1, n, align, &zeroed);
    EXPECT_NE(p, nullptr);
    return p;
  }
  PageIndex BlockOf(void* p) { return PageIndex{r_.page(PageIndex{uint32_t(r_.offset_of(p) >> kPageShift)}).block}; }
  LargeFreeResult Free(void* p) { return heap_.free_local(BlockOf(p), p); }

  disciplines::AnonymousSource source_;
  Region r_;
  PageHeapBlocks blocks_{r_, source_};
  LargeHeap heap_;
};

// Chunks above 16 KiB skip the quick cache: their frees merge at once.
TEST_F(LargeHeapTest, SplitsOneBlockAndCoalescesItBackWhole) {
  auto* a = static_cast<char*>(Alloc(20000));
  auto* b = static_cast<char*>(Alloc(20000));
  auto* c = static_cast<char*>(Alloc(20000));
  EXPECT_EQ(blocks_.acquired, 1);  // all three from one block
  EXPECT_EQ(b - a, 20016);                    // header + payload, 16-byte granular
  EXPECT_EQ(LargeHeap::usable_size(a), 20000u);
  EXPECT_EQ(Free(a), LargeFreeResult::kFreed);
  EXPECT_EQ(Free(c), LargeFreeResult::kFreed);
  EXPECT_EQ(Free(b), LargeFreeResult::kBlockEmpty);  // merged with both neighbours
}

TEST_F(LargeHeapTest, TakesTheBestFittingHole) {
  std::vector<void*> v;
  for (size_t n : {17000, 20000, 17500, 20000}) v.push_back(Alloc(n));
  Free(v[2]);  // a 17500-byte hole
  Free(v[0]);  // a 17000-byte hole
  EXPECT_EQ(Alloc(16500), v[0]);  // best fit: the smaller hole that fits
  EXPECT_EQ(Alloc(17200), v[2]);
}

TEST_F(LargeHeapTest, TheQuickCacheHandsBackAChunkOfTheSameSize) {
  void* p = Alloc(5000);
  Free(p);
  EXPECT_EQ(heap_.try_quick(5000), p);
  Free(p);
  EXPECT_EQ(heap_.try_quick(5100), nullptr);  // another size misses
  int emptied = 0;
  heap_.flush_quick([&](PageIndex) { ++emptied; });
  EXPECT_EQ(emptied, 1);  // merging it emptied its block
}

// init leaves the list heads as they are (a thread heap's pages stay
// untouched until it has large objects): a heap made over memory full of
// stale bytes, as a reused or default-initialized one is, must follow none
// of them, in the quick cache or the bins.
TEST_F(LargeHeapTest, AHeapOverStaleMemoryFollowsNoneOfItsOldListHeads) {
  alignas(LargeHeap) unsigned char storage[sizeof(LargeHeap)];
  std::memset(storage, 0xab, sizeof storage);
  auto* stale = new (storage) LargeHeap;
  stale->init(r_, 32768, 20, 0x5eed);
  bool zeroed;
  std::vector<void*> live;
  for (size_t n : {600, 5000, 5000, 9000, 16384, 20000, 30000, 600}) {
    void* p = stale->alloc(blocks_, 1, n, 16, &zeroed);
    ASSERT_NE(p, nullptr);
    live.push_back(p);
  }
  EXPECT_EQ(stale->try_quick(5000), nullptr);  // nothing cached yet
  // Frees into the quick cache (up to 16 KiB) and into the bins (past it),
  // then the same sizes again: each comes back from where it was put.
  for (size_t i : {1, 4, 5}) EXPECT_EQ(stale->free_local(BlockOf(live[i]), live[i]), LargeFreeResult::kFreed);
  EXPECT_EQ(stale->try_quick(5000), live[1]);
  EXPECT_EQ(stale->try_quick(5000), nullptr);
  EXPECT_EQ(stale->try_quick(16384), live[4]);
  EXPECT_EQ(stale->alloc(blocks_, 1, 20000, 16, &zeroed), live[5]);  // the bin's chunk
  int emptied = 0;
  for (void* p : live) {
    LargeFreeResult f = stale->free_local(BlockOf(p), p);
    EXPECT_NE(f, LargeFreeResult::kInvalid);
    if (f == LargeFreeResult::kBlockEmpty) ++emptied;
  }
  stale->flush_quick([&](PageIndex) { ++emptied; });
  EXPECT_EQ(emptied, blocks_.acquired);  // everything merged back into whole blocks
}

// 16 KiB, a size programs ask for often, is the largest the cache takes.
TEST_F(LargeHeapTest, TheQuickCacheTakesSixteenKiBObjectsAndNoLarger) {
  void* p = Alloc(16384);
  EXPECT_EQ(Free(p), LargeFreeResult::kFreed);  // waits in the cache: the block is not empty
  EXPECT_EQ(heap_.try_quick(16384), p);
  EXPECT_EQ(Free(p), LargeFreeResult::kFreed);
  void* q = Alloc(16385);
  EXPECT_NE(q, p);
  EXPECT_EQ(Free(q), LargeFreeResult::kFreed);  // merged at once
  EXPECT_EQ(heap_.try_quick(16385), nullptr);
}

TEST_F(LargeHeapTest, AlignedChunksStartOnTheAlignment) {
  for (size_t align : {32, 256, 1024, 4096}) {
    void* p = Alloc(700, align);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % align, 0u) << align;
    EXPECT_GE(LargeHeap::usable_size(p), 700u);
  }
}

TEST_F(LargeHeapTest, BadAndDoubleFreesAreRecognised) {
  auto* p = static_cast<char*>(Alloc(3000));
  EXPECT_EQ(Free(p + 16), LargeFreeResult::kInvalid);
  EXPECT_EQ(Free(p), LargeFreeResult::kFreed);
  EXPECT_EQ(Free(p), LargeFreeResult::kDoubleFree);  // in the quick cache
  EXPECT_EQ(LargeHeap::claim_remote(r_, 0x5eed, BlockOf(p), p), LargeFreeResult::kDoubleFree);
}

TEST_F(LargeHeapTest, ResizesInPlaceIntoTheFreeSpaceAfter) {
  void* p = Alloc(1000);
  EXPECT_TRUE(heap_.resize_in_place(BlockOf(p), p, 30000));
  EXPECT_GE(LargeHeap::usable_size(p), 30000u);
  EXPECT_TRUE(heap_.resize_in_place(BlockOf(p), p, 600));
  EXPECT_LT(LargeHeap::usable_size(p), 2000u);
}

}  // namespace
}  // namespace memd::heap
