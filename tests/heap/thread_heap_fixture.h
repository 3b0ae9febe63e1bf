// A test fixture for the heap tests that need one thread heap on a formatted
// 256 MiB anonymous region (no discarding, so freed pages keep their bytes):
// the region, its page-heap owner, an owner-heap pool and the test thread's
// heap attached to it; and what tests of its raw state share (objects of one
// block, recovery, the check).
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "region/thread_heap_pool.h"
#include "region/page_heap_owner.h"
#include "disciplines/anonymous.h"
#include "heap/inspect.h"
#include "heap/recovery.h"
#include "heap/region_format.h"

namespace memd::heap {

class ThreadHeapFixture : public ::testing::Test {
 protected:
  ThreadHeapFixture() {
    params_.discard_mode = DiscardMode::kNever;
    // With a large range (16-32 KiB), as the defaults had before classes
    // reached 64 KiB: tests here take the large path with sizes in it.
    params_.medium_max = 16384;
    params_.large_max = 32768;
  }
  // A test's own parameters: set params_ in its fixture's constructor.
  void SetUp() override {
    ASSERT_TRUE(source_.reserve(size_t{256} << 20));
    ASSERT_TRUE(region_format(source_, params_, 16, 0xfeed));
    pages_.init(&source_, Region::attach(source_.base()));
    ASSERT_TRUE(pool_.init(r(), &pages_.classes(), &pages_, kProcessHolder));
    heap_ = pool_.attach_thread();
    ASSERT_NE(heap_, nullptr);
  }
  const Region& r() const { return pages_.region(); }
  // The first page of the block or run holding p.
  PageIndex block_of(const void* p) const {
    return PageIndex{r().page(PageIndex{static_cast<uint32_t>(r().offset_of(p) >> kPageShift)}).block};
  }
  // p's offset in its block.
  uint32_t in_block(const void* p) const {
    return static_cast<uint32_t>(static_cast<const char*>(p) - r().page_address(block_of(p)));
  }
  // `n` objects of `size` bytes from one segregated block.
  std::vector<char*> same_block(size_t size, size_t n) {
    std::vector<char*> got;
    char* first = static_cast<char*>(heap_->alloc(size));
    got.push_back(first);
    while (got.size() < n) {
      auto* p = static_cast<char*>(heap_->alloc(size));
      EXPECT_NE(p, nullptr);
      if (block_of(p) == block_of(first)) got.push_back(p);
    }
    return got;
  }
  // The recovery of an owner's open (after a crash, or after an upgrade).
  RecoveryReport recover() {
    RecoveryReport report;
    region_recover(r(), pages_.classes(), source_, [](PageIndex) {}, &report);
    return report;
  }
  void expect_consistent() {
    char msg[256];
    EXPECT_TRUE(region_check(r(), pages_.classes(), msg, sizeof msg)) << msg;
  }

  HeapParams params_;
  disciplines::AnonymousSource source_;
  region::PageHeapOwner pages_;
  region::ThreadHeapPool pool_;
  ThreadHeap* heap_ = nullptr;
};

}  // namespace memd::heap
