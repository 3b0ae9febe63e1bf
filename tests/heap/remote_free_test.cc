// The notification protocol of remote frees (heap/remote_free.h).
#include "heap/remote_free.h"

#include <gtest/gtest.h>

#include "disciplines/anonymous.h"
#include "heap/page_heap.h"
#include "heap/region_format.h"

namespace memd::heap {
namespace {

class RemoteFreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(source_.reserve(size_t{256} << 20));
    ASSERT_TRUE(region_format(source_, HeapParams{}, 16, 42));
    r_ = Region::attach(source_.base());
    RunAllocation run = page_heap_alloc(r_, source_, PageCount{2}, PageKind::kSegregated, 4);
    ASSERT_NE(run.first, kNoPage);
    block_ = run.first;
    pending_open(r_, kOwner);
    set_owner(r_.block(block_), kOwner);
  }
  BlockDesc& b() { return r_.block(block_); }
  bool notified() { return b().owner_word.load() & 1; }

  static constexpr OwnerId kOwner = (1u << kOwnerSlotBits) | 3;  // generation 1, slot 3
  disciplines::AnonymousSource source_;
  Region r_;
  PageIndex block_;
};

TEST_F(RemoteFreeTest, TheOwnerIsToldOnceAndSettlesTheBlock) {
  notify_owner(r_, block_);
  EXPECT_TRUE(notified());
  notify_owner(r_, block_);  // already told: no second entry
  uint32_t head = pending_take(r_, kOwner);
  ASSERT_EQ(head, block_.value + 1);
  uint32_t next = 99;
  EXPECT_TRUE(pending_settle(r_, kOwner, block_, &next));
  EXPECT_EQ(next, 0u);  // one entry only
  EXPECT_FALSE(notified());
  EXPECT_EQ(pending_take(r_, kOwner), 0u);
}

TEST_F(RemoteFreeTest, ABlockCannotBeDisownedWhileANotificationIsOut) {
  notify_owner(r_, block_);
  EXPECT_FALSE(try_disown(b(), kOwner));
  uint32_t next;
  pending_settle(r_, kOwner, PageIndex{pending_take(r_, kOwner) - 1}, &next);
  EXPECT_TRUE(try_disown(b(), kOwner));
  EXPECT_EQ(owner_of(b().owner_word.load()), kNoOwner);
}

TEST_F(RemoteFreeTest, AClosedStackRefusesAndTheTokenComesBack) {
  EXPECT_EQ(pending_close(r_, kOwner), 0u);
  notify_owner(r_, block_);
  EXPECT_FALSE(notified());  // the push failed; the bit was handed back
  EXPECT_TRUE(try_disown(b(), kOwner));
}

TEST_F(RemoteFreeTest, ANewThreadInTheSameSlotNeverGetsTheOldOnesNotifications) {
  // The slot now belongs to generation 2; the block still names generation 1.
  pending_open(r_, (2u << kOwnerSlotBits) | 3);
  notify_owner(r_, block_);
  EXPECT_FALSE(notified());
  EXPECT_EQ(pending_take(r_, (2u << kOwnerSlotBits) | 3), 0u);
}

TEST_F(RemoteFreeTest, FreesIntoAnOwnerlessBlockAreCountedForTheSweep) {
  ASSERT_TRUE(try_disown(b(), kOwner));
  uint32_t before = r_.header->abandoned_frees.load();
  notify_owner(r_, block_);
  EXPECT_EQ(r_.header->abandoned_frees.load(), before + 1);
  EXPECT_FALSE(notified());
}

TEST_F(RemoteFreeTest, AStaleEntryIsSkippedWhenTheBlockChangedOwner) {
  notify_owner(r_, block_);
  uint32_t head = pending_take(r_, kOwner);
  // The owner changed after the push (as adoption would do it).
  set_owner(b(), (5u << kOwnerSlotBits) | 7);
  uint32_t next;
  EXPECT_FALSE(pending_settle(r_, kOwner, PageIndex{head - 1}, &next));
}

}  // namespace
}  // namespace memd::heap
