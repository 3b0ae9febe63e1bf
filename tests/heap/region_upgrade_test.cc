// Upgrading a version-2 region in place (heap/region_upgrade.h). The tests
// make a region with this build, then write into it what a version-2 build
// would have left (a 32-bit remote-list head at byte 48 of a BlockDesc,
// chained through the objects; a stale pending-stack link at byte 56),
// mark it version 2, and upgrade it: the lists are counted and re-encoded,
// recovery then collects their objects, and the region checks clean.
#include "heap/region_upgrade.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "region/thread_heap_pool.h"
#include "region/page_heap_owner.h"
#include "disciplines/anonymous.h"
#include "heap/block.h"
#include "heap/inspect.h"
#include "heap/large_heap.h"
#include "heap/recovery.h"
#include "heap/region_format.h"
#include "tests/heap/thread_heap_fixture.h"

namespace memd::heap {
namespace {

class RegionUpgradeTest : public ThreadHeapFixture {
 protected:
  // Writes what a version-2 build's remote frees of `objs` (in this order)
  // left in a segregated block: tags, links, the head at byte 48, and a
  // stale pending-stack link where version 3 keeps the remote word.
  void write_v2_list(const std::vector<char*>& objs) {
    BlockDesc& b = r().block(block_of(objs[0]));
    uint32_t head = 0;
    for (char* p : objs) {
      tag_of(p) = free_tag(r().header->secret, r().offset_of(p));
      link_of(p) = head;
      head = in_block(p) + 1;
    }
    b.pending_next.store(head);     // version 2's remote_head
    b.remote.store(uint64_t{0x77});  // version 2's pending_next (stale), and padding
  }
  void mark_version_2() { r().header->version = 2; }
};

TEST_F(RegionUpgradeTest, Version2RemoteListsAreCountedThenCollected) {
  std::vector<char*> objs = same_block(48, 20);
  std::vector<char*> freed(objs.begin() + 3, objs.begin() + 8);
  write_v2_list(freed);
  // A large block with one remotely freed chunk on its version-2 list.
  volatile size_t large_size = 20000;  // large past medium_max; not a constant: alloc's inline size-class path stays out of it
  char* a = static_cast<char*>(heap_->alloc(large_size));
  char* c = static_cast<char*>(heap_->alloc(large_size));
  PageIndex large = block_of(a);
  ASSERT_EQ(block_of(c), large);
  ASSERT_EQ(LargeHeap::claim_remote(r(), r().header->secret, large, c), LargeFreeResult::kFreed);
  *reinterpret_cast<uint32_t*>(c) = 0;
  r().block(large).pending_next.store(in_block(c) - sizeof(ChunkHeader) + 1);
  r().block(large).remote.store(0);
  // A descriptor that heads no block, with stale bytes in both places.
  BlockDesc& inner = r().block(large + PageCount{3});
  inner.pending_next.store(12345);
  inner.remote.store(0x99);
  mark_version_2();

  char why[300];
  EXPECT_EQ(region_validate(*r().header, source_.reserved_bytes(), why, sizeof why), FormatError::kUpgradable);
  EXPECT_NE(std::strstr(why, "upgrades the region in place"), nullptr) << why;
  uint64_t leaked = 0;
  ASSERT_TRUE(region_upgrade(r(), source_, &leaked));
  EXPECT_EQ(leaked, 0u);
  EXPECT_EQ(r().header->version, kFormatVersion);
  EXPECT_EQ(region_validate(*r().header, source_.reserved_bytes(), why, sizeof why), FormatError::kOk) << why;

  BlockDesc& b = r().block(block_of(objs[0]));
  RemoteList l = RemoteList::unpack(b.remote.load());
  EXPECT_EQ(l.count, freed.size());
  EXPECT_EQ(l.head, in_block(freed.back()) + 1);
  EXPECT_EQ(l.tail, in_block(freed.front()) + 1);
  EXPECT_EQ(b.pending_next.load(), 0u);
  EXPECT_EQ(RemoteList::unpack(r().block(large).remote.load()).count, 1u);
  EXPECT_EQ(inner.remote.load(), 0u);
  EXPECT_EQ(inner.pending_next.load(), 0u);

  // The next owner's recovery collects them.
  RecoveryReport rep = recover();
  EXPECT_EQ(rep.leaked_objects, 0u);
  expect_consistent();
  for (char* p : freed) EXPECT_EQ(heap_->validate(p), FreeStatus::kDoubleFree);
  EXPECT_EQ(heap_->validate(objs[0]), FreeStatus::kOk);
  EXPECT_EQ(heap_->validate(c), FreeStatus::kDoubleFree);
  EXPECT_EQ(heap_->validate(a), FreeStatus::kOk);
  RegionStats s = region_stat(r(), pages_.classes());
  EXPECT_EQ(s.busy_objects, objs.size() - freed.size() + 1);
}

TEST_F(RegionUpgradeTest, AnUpgradeCutShortByACrashRunsAgain) {
  std::vector<char*> one = same_block(48, 10);
  std::vector<char*> two = same_block(200, 10);
  ASSERT_NE(block_of(one[0]), block_of(two[0]));
  std::vector<char*> freed_one(one.begin(), one.begin() + 4);
  std::vector<char*> freed_two(two.begin() + 2, two.begin() + 9);
  write_v2_list(freed_one);
  write_v2_list(freed_two);
  uint32_t old_head_one = r().block(block_of(one[0])).pending_next.load();
  mark_version_2();
  uint64_t leaked = 0;
  ASSERT_TRUE(region_upgrade(r(), source_, &leaked));
  // The crash: the header still said version 2; block one had its new word
  // but not yet its old head cleared; block two was not reached at all.
  mark_version_2();
  r().block(block_of(one[0])).pending_next.store(old_head_one);
  write_v2_list(freed_two);
  ASSERT_TRUE(region_upgrade(r(), source_, &leaked));
  EXPECT_EQ(leaked, 0u);
  EXPECT_EQ(RemoteList::unpack(r().block(block_of(one[0])).remote.load()).count, freed_one.size());
  EXPECT_EQ(r().block(block_of(one[0])).pending_next.load(), 0u);
  EXPECT_EQ(RemoteList::unpack(r().block(block_of(two[0])).remote.load()).count, freed_two.size());
  recover();
  expect_consistent();
  RegionStats s = region_stat(r(), pages_.classes());
  EXPECT_EQ(s.busy_objects, one.size() + two.size() - freed_one.size() - freed_two.size());
}

TEST_F(RegionUpgradeTest, ABrokenVersion2ListIsCutAndACycleDropped) {
  std::vector<char*> one = same_block(48, 10);
  std::vector<char*> two = same_block(200, 10);
  write_v2_list({one[0], one[1], one[2]});
  link_of(one[0]) = 5 * 4096 + 1;  // the list's last link leaves the block
  write_v2_list({two[0], two[1]});
  link_of(two[0]) = in_block(two[1]) + 1;  // two[1] -> two[0] -> two[1] ...
  mark_version_2();
  uint64_t leaked = 0;
  ASSERT_TRUE(region_upgrade(r(), source_, &leaked));
  EXPECT_EQ(leaked, 2u);
  EXPECT_EQ(RemoteList::unpack(r().block(block_of(one[0])).remote.load()).count, 3u);
  EXPECT_EQ(link_of(one[0]), 0u);  // cut where it left
  EXPECT_EQ(r().block(block_of(two[0])).remote.load(), 0u);
  recover();
  expect_consistent();
}

TEST_F(RegionUpgradeTest, Version3StaleLinksWhereTakenWordsGoAreCleared) {
  // A version-3 in-use block kept in bytes 32..39 the LRU links it had as a
  // free run; version 4 reads them as its taken word.
  std::vector<char*> objs = same_block(48, 20);
  for (int i = 2; i < 6; ++i) link_of(objs[i]) = in_block(objs[i + 1]) + 1;
  BlockDesc& b = r().block(block_of(objs[0]));
  b.taken = RemoteList{in_block(objs[2]) + 1, in_block(objs[5]) + 1, 4}.pack();  // what looks like a list
  volatile size_t huge_size = size_t{2} << 20;
  char* huge = static_cast<char*>(heap_->alloc(huge_size));
  ASSERT_NE(huge, nullptr);
  r().block(block_of(huge)).taken = 0x1234567812345678ull;
  r().header->version = 3;
  uint64_t leaked = 0;
  ASSERT_TRUE(region_upgrade(r(), source_, &leaked));
  EXPECT_EQ(r().header->version, kFormatVersion);
  EXPECT_EQ(b.taken, 0u);
  EXPECT_EQ(r().block(block_of(huge)).taken, 0u);
  recover();
  expect_consistent();
  for (char* p : objs) EXPECT_EQ(heap_->validate(p), FreeStatus::kOk) << "a live object was freed";
}

TEST_F(RegionUpgradeTest, OtherVersionsAreRefusedWithWhatThisBuildReads) {
  char why[300];
  uint64_t leaked = 0;
  for (uint32_t v : {1u, kFormatVersion + 1}) {
    r().header->version = v;
    EXPECT_EQ(region_validate(*r().header, source_.reserved_bytes(), why, sizeof why), FormatError::kVersion);
    std::string reads = "this build reads version " + std::to_string(kFormatVersion);
    EXPECT_NE(std::strstr(why, reads.c_str()), nullptr) << why;
    EXPECT_FALSE(region_upgrade(r(), source_, &leaked));
    EXPECT_EQ(r().header->version, v);
  }
}

}  // namespace
}  // namespace memd::heap
