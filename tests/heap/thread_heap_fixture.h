// A test fixture for the heap tests that need one thread heap on a formatted
// 256 MiB anonymous region (no discarding, so freed pages keep their bytes):
// the region, its page-heap owner, an owner-heap pool and the test thread's
// heap attached to it.
#pragma once

#include <gtest/gtest.h>

#include "region/thread_heap_pool.h"
#include "region/page_heap_owner.h"
#include "disciplines/anonymous.h"
#include "heap/region_format.h"

namespace memd::heap {

class ThreadHeapFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(source_.reserve(size_t{256} << 20));
    HeapParams params;
    params.discard_mode = DiscardMode::kNever;
    ASSERT_TRUE(region_format(source_, params, 16, 0xfeed));
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

  disciplines::AnonymousSource source_;
  region::PageHeapOwner pages_;
  region::ThreadHeapPool pool_;
  ThreadHeap* heap_ = nullptr;
};

}  // namespace memd::heap
