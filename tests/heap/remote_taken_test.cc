// Remote frees an owner took off a block's remote list and had not yet moved
// when it died (heap/remote_free.h, "Taking"). Each test leaves a block as a
// kill -9 at one instant of a collection would (the steps done by hand, the
// rest not), then recovers, and checks that no freed object leaked, none is
// free twice, and the region checks clean.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "heap/block.h"
#include "heap/inspect.h"
#include "heap/large_heap.h"
#include "heap/recovery.h"
#include "heap/remote_free.h"
#include "tests/heap/thread_heap_fixture.h"

namespace memd::heap {
namespace {

class RemoteTakenTest : public ThreadHeapFixture {
 protected:
  char* base_of(const void* p) { return r().page_address(block_of(p)); }
  // A free of p by a thread that does not own its block (no notification:
  // the owner is about to die anyway).
  void free_remotely(char* p) {
    BlockDesc& b = r().block(block_of(p));
    ASSERT_NE(block_free_remote(b, p, in_block(p), free_tag(r().header->secret, r().offset_of(p))),
              RemoteFree::kAlreadyFree);
  }
  void free_large_remotely(char* p) {
    PageIndex block = block_of(p);
    ASSERT_EQ(LargeHeap::claim_remote(r(), r().header->secret, block, p), LargeFreeResult::kFreed);
    remote_push(r().block(block), p, in_block(p) - sizeof(ChunkHeader));
  }
  // After recovery: exactly `live` busy objects, every freed one free, the
  // taken word of each block cleared.
  void expect_recovered(const std::vector<char*>& freed, const std::vector<char*>& kept) {
    RecoveryReport rep = recover();
    EXPECT_EQ(rep.leaked_objects, 0u);
    expect_consistent();
    for (char* p : freed) EXPECT_EQ(heap_->validate(p), FreeStatus::kDoubleFree) << "a freed object leaked";
    for (char* p : kept) EXPECT_EQ(heap_->validate(p), FreeStatus::kOk) << "a live object was freed";
    RegionStats s = region_stat(r(), pages_.classes());
    EXPECT_EQ(s.busy_objects, kept.size());
    for (char* p : kept) EXPECT_EQ(r().block(block_of(p)).taken, 0u);
  }
  std::vector<char*> without(const std::vector<char*>& all, const std::vector<char*>& gone) {
    std::vector<char*> rest;
    for (char* p : all) {
      if (std::find(gone.begin(), gone.end(), p) == gone.end()) rest.push_back(p);
    }
    return rest;
  }
};

TEST_F(RemoteTakenTest, AListTakenAndNotYetMovedIsFreed) {
  std::vector<char*> objs = same_block(48, 20);
  std::vector<char*> freed(objs.begin() + 2, objs.begin() + 7);
  for (char* p : freed) free_remotely(p);
  BlockDesc& b = r().block(block_of(objs[0]));
  ASSERT_NE(remote_take(b), 0u);  // the owner dies here
  EXPECT_EQ(b.remote.load(), 0u);
  expect_recovered(freed, without(objs, freed));
}

TEST_F(RemoteTakenTest, ATakeCaughtBeforeItsExchangeLosesNothingAndFreesNothingTwice) {
  // The taken word written, the CAS not yet done, and another push since:
  // the remote list holds the taken one as its suffix.
  std::vector<char*> objs = same_block(48, 20);
  std::vector<char*> freed(objs.begin() + 1, objs.begin() + 5);
  for (char* p : freed) free_remotely(p);
  BlockDesc& b = r().block(block_of(objs[0]));
  remote_taken_set(b, b.remote.load());
  free_remotely(objs[9]);
  freed.push_back(objs[9]);
  expect_recovered(freed, without(objs, freed));
}

TEST_F(RemoteTakenTest, AHalfDoneSpliceIsFinished) {
  // The local free list is not empty, the taken list's tail already links
  // to its head, B's free_head not yet moved.
  std::vector<char*> objs = same_block(48, 20);
  std::vector<char*> local = {objs[10], objs[11]};
  for (char* p : local) heap_->free(p);
  std::vector<char*> remote(objs.begin() + 2, objs.begin() + 6);
  for (char* p : remote) free_remotely(p);
  BlockDesc& b = r().block(block_of(objs[0]));
  RemoteList l = RemoteList::unpack(remote_take(b));
  link_of(base_of(objs[0]) + l.tail - 1) = b.free_head;  // the owner dies here
  std::vector<char*> freed = remote;
  freed.insert(freed.end(), local.begin(), local.end());
  expect_recovered(freed, without(objs, freed));
}

TEST_F(RemoteTakenTest, AOneByOneMoveCutShortGoesOnFromWhereItWas) {
  // collect_walking's rebuild: two objects moved, the third's link already
  // rewritten onto the free list, free_head not yet moved to it.
  std::vector<char*> objs = same_block(48, 20);
  std::vector<char*> freed(objs.begin() + 3, objs.begin() + 9);
  for (char* p : freed) free_remotely(p);
  BlockDesc& b = r().block(block_of(objs[0]));
  char* base = base_of(objs[0]);
  uint32_t head = RemoteList::head_of(remote_take(b));
  for (int moved = 0; moved < 3; ++moved) {
    char* p = base + head - 1;
    uint32_t next = link_of(p);
    remote_taken_at(b, head, next);
    link_of(p) = b.free_head;
    if (moved == 2) break;  // the owner dies here
    b.free_head = head;
    head = next;
  }
  expect_recovered(freed, without(objs, freed));
}

TEST_F(RemoteTakenTest, LargeChunksTakenAndPartlyReleasedAreFreed) {
  // Four large objects fill a large block (20 pages).
  volatile size_t size = 17000;  // large past medium_max; not a constant: alloc's inline path stays out of it
  std::vector<char*> objs;
  char* first = static_cast<char*>(heap_->alloc(size));
  objs.push_back(first);
  for (int i = 0; i < 8 && objs.size() < 4; ++i) {
    auto* p = static_cast<char*>(heap_->alloc(size));
    if (block_of(p) == block_of(first)) objs.push_back(p);
  }
  ASSERT_EQ(objs.size(), 4u);
  std::sort(objs.begin(), objs.end());
  std::vector<char*> freed = {objs[1], objs[2], objs[3]};
  for (char* p : freed) free_large_remotely(p);
  BlockDesc& b = r().block(block_of(first));
  char* base = base_of(first);
  auto* last = reinterpret_cast<ChunkHeader*>(objs[3]) - 1;
  ASSERT_EQ(reinterpret_cast<char*>(last) + last->size, base + b.pages.bytes()) << "the four objects fill the block";
  uint32_t head = RemoteList::head_of(remote_take(b));
  // The first chunk released (marked free, its list link overwritten;
  // merging would follow), the owner dies before it names the second:
  // recovery goes on from the taken word's tail field.
  auto* c = reinterpret_cast<ChunkHeader*>(base + head - 1);
  uint32_t next = *reinterpret_cast<uint32_t*>(c + 1);
  remote_taken_at(b, head, next);
  __atomic_store_n(&c->state, kChunkFree, __ATOMIC_RELEASE);
  *reinterpret_cast<uint64_t*>(c + 1) = ~uint64_t{0};  // bin links written over the list link
  expect_recovered(freed, without(objs, freed));
  // Freed for reuse, not left marked remote: one free chunk from the first
  // freed object to the end of the block.
  auto* rest = reinterpret_cast<ChunkHeader*>(objs[1]) - 1;
  EXPECT_EQ(__atomic_load_n(&rest->state, __ATOMIC_ACQUIRE), kChunkFree);
  EXPECT_EQ(reinterpret_cast<char*>(rest) + rest->size, base + r().block(block_of(first)).pages.bytes());
}

TEST_F(RemoteTakenTest, ALiveCollectionLeavesNothingTaken) {
  std::vector<char*> objs = same_block(48, 20);
  for (int i = 0; i < 5; ++i) free_remotely(objs[i]);
  BlockDesc& b = r().block(block_of(objs[0]));
  EXPECT_EQ(block_collect_remote(b, base_of(objs[0])), 5u);
  EXPECT_EQ(b.taken, 0u);
  EXPECT_EQ(b.remote.load(), 0u);
}

}  // namespace
}  // namespace memd::heap
