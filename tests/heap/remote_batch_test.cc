// Remote frees gathered per size class (ThreadHeap::enable_remote_batching):
// a thread that frees another thread's objects links them into one chain per
// class and pushes the chain on the block's remote list at once.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "heap/block.h"
#include "tests/heap/thread_heap_fixture.h"

namespace memd::heap {
namespace {

class RemoteBatchTest : public ThreadHeapFixture {
 protected:
  void SetUp() override {
    ThreadHeapFixture::SetUp();
    freer_ = pool_.attach_thread();  // another owner id: every free of heap_'s objects is remote
    ASSERT_NE(freer_, nullptr);
    freer_->enable_remote_batching();
  }
  RemoteList remote_of(const void* p) const { return RemoteList::unpack(r().block(block_of(p)).remote.load()); }
  bool notified(const void* p) const { return r().block(block_of(p)).owner_word.load() & 1; }
  // The objects on p's block's remote list, walked from its head.
  std::set<const void*> listed(const void* p) const {
    std::set<const void*> got;
    char* base = r().page_address(block_of(p));
    for (uint32_t e = remote_of(p).head; e != 0 && got.size() < 10000; e = link_of(base + e - 1)) {
      got.insert(base + e - 1);
    }
    return got;
  }
  ThreadHeap* freer_ = nullptr;
};

TEST_F(RemoteBatchTest, FreesOfOneBlockWaitInOneChainUntilFlushed) {
  std::vector<char*> objs = same_block(64, 10);
  for (char* p : objs) ASSERT_EQ(freer_->free(p), FreeStatus::kOk);
  EXPECT_EQ(remote_of(objs[0]).head, 0u) << "pushed before the chain was full or flushed";
  EXPECT_FALSE(notified(objs[0]));
  freer_->flush_remote_frees();
  RemoteList l = remote_of(objs[0]);
  EXPECT_EQ(l.count, 10u);
  EXPECT_EQ(l.tail, in_block(objs[0]) + 1) << "the oldest free is the chain's tail";
  EXPECT_EQ(listed(objs[0]), std::set<const void*>(objs.begin(), objs.end()));
  EXPECT_TRUE(notified(objs[0])) << "the owner was not told of the push";
  // The owner takes them back: its block is empty again.
  heap_->release_empty();
  expect_consistent();
}

TEST_F(RemoteBatchTest, AFullChainIsPushedWithoutAFlush) {
  // 32-byte objects (a block holds 256): kRemoteBatch of them are well
  // under kRemoteBatchBytes.
  std::vector<char*> objs = same_block(32, ThreadHeap::kRemoteBatch + 1);
  for (uint32_t i = 0; i < ThreadHeap::kRemoteBatch; ++i) ASSERT_EQ(freer_->free(objs[i]), FreeStatus::kOk);
  EXPECT_EQ(remote_of(objs[0]).count, ThreadHeap::kRemoteBatch);
  ASSERT_EQ(freer_->free(objs.back()), FreeStatus::kOk);  // the start of the next chain
  EXPECT_EQ(remote_of(objs[0]).count, ThreadHeap::kRemoteBatch);
  freer_->flush_remote_frees();
  EXPECT_EQ(remote_of(objs[0]).count, ThreadHeap::kRemoteBatch + 1);
  EXPECT_EQ(listed(objs[0]).size(), ThreadHeap::kRemoteBatch + 1);
}

TEST_F(RemoteBatchTest, AChainHoldsAtMostItsBytesOfBigObjects) {
  // 4 KiB objects: a chain of kRemoteBatchBytes / 4096 of them.
  const uint32_t limit = ThreadHeap::kRemoteBatchBytes / 4096;
  std::vector<char*> objs = same_block(4096, limit);
  for (uint32_t i = 0; i + 1 < limit; ++i) ASSERT_EQ(freer_->free(objs[i]), FreeStatus::kOk);
  EXPECT_EQ(remote_of(objs[0]).count, 0u);
  ASSERT_EQ(freer_->free(objs.back()), FreeStatus::kOk);
  EXPECT_EQ(remote_of(objs[0]).count, limit);
}

TEST_F(RemoteBatchTest, AFreeOfAnotherBlockPushesTheClassChain) {
  // Fill one block of the class and start a second one.
  std::vector<char*> first = same_block(64, 3);
  std::vector<char*> objs;
  char* other = nullptr;
  while (other == nullptr) {
    auto* p = static_cast<char*>(heap_->alloc(64));
    ASSERT_NE(p, nullptr);
    objs.push_back(p);
    if (block_of(p) != block_of(first[0])) other = p;
  }
  for (char* p : first) ASSERT_EQ(freer_->free(p), FreeStatus::kOk);
  EXPECT_EQ(remote_of(first[0]).count, 0u);
  ASSERT_EQ(freer_->free(other), FreeStatus::kOk);
  EXPECT_EQ(remote_of(first[0]).count, 3u) << "the chain of the first block waits on";
  EXPECT_EQ(remote_of(other).count, 0u);
  // Another class keeps its own chain.
  auto* small = static_cast<char*>(heap_->alloc(16));
  ASSERT_EQ(freer_->free(small), FreeStatus::kOk);
  EXPECT_EQ(remote_of(other).count, 0u);
  freer_->flush_remote_frees();
  EXPECT_EQ(remote_of(other).count, 1u);
  EXPECT_EQ(remote_of(small).count, 1u);
  for (char* p : objs) {
    if (p != other && block_of(p) != block_of(first[0])) heap_->free(p);
  }
}

TEST_F(RemoteBatchTest, AWaitingObjectFreedAgainIsADoubleFree) {
  std::vector<char*> objs = same_block(48, 4);
  ASSERT_EQ(freer_->free(objs[1]), FreeStatus::kOk);
  EXPECT_EQ(freer_->free(objs[1]), FreeStatus::kDoubleFree);
  EXPECT_EQ(heap_->free(objs[1]), FreeStatus::kDoubleFree) << "the owner freed an object waiting in a chain";
  freer_->flush_remote_frees();
  EXPECT_EQ(remote_of(objs[1]).count, 1u) << "the object went on the list twice";
  for (char* p : {objs[0], objs[2], objs[3]}) ASSERT_EQ(heap_->free(p), FreeStatus::kOk);
  heap_->release_empty();
  expect_consistent();
}

TEST_F(RemoteBatchTest, TheAllocationSlowPathAndAbandonPushTheChains) {
  std::vector<char*> objs = same_block(64, 5);
  ASSERT_EQ(freer_->free(objs[0]), FreeStatus::kOk);
  // The freer's first allocation of a class takes its slow path.
  void* mine = freer_->alloc(200);
  ASSERT_NE(mine, nullptr);
  EXPECT_EQ(remote_of(objs[0]).count, 1u);
  ASSERT_EQ(freer_->free(objs[1]), FreeStatus::kOk);
  ASSERT_EQ(freer_->free(mine), FreeStatus::kOk);
  freer_->abandon_all();
  EXPECT_EQ(remote_of(objs[0]).count, 2u);
}

TEST_F(RemoteBatchTest, WithBatchingOffEveryRemoteFreeIsPushedAtOnce) {
  ThreadHeap* plain = pool_.attach_thread();
  ASSERT_NE(plain, nullptr);
  std::vector<char*> objs = same_block(64, 3);
  for (size_t i = 0; i < objs.size(); ++i) {
    ASSERT_EQ(plain->free(objs[i]), FreeStatus::kOk);
    EXPECT_EQ(remote_of(objs[0]).count, i + 1);
  }
}

TEST_F(RemoteBatchTest, AFreeBatchGathersEvenWithBatchingOffAndPushesBeforeItEnds) {
  ThreadHeap* plain = pool_.attach_thread();
  ASSERT_NE(plain, nullptr);
  std::vector<char*> objs = same_block(64, 8);
  {
    ThreadHeap::GatherRemoteFrees gather(plain);
    for (char* p : objs) ASSERT_EQ(plain->free(p), FreeStatus::kOk);
    EXPECT_EQ(remote_of(objs[0]).count, 0u) << "pushed one by one inside a batch";
  }
  EXPECT_EQ(remote_of(objs[0]).count, objs.size()) << "the batch's chain outlived it";
  EXPECT_EQ(listed(objs[0]), std::set<const void*>(objs.begin(), objs.end()));
  // Batching is off again afterwards.
  std::vector<char*> more = same_block(64, 2);
  ASSERT_EQ(plain->free(more[0]), FreeStatus::kOk);
  EXPECT_EQ(remote_of(more[0]).count, block_of(more[0]) == block_of(objs[0]) ? objs.size() + 1 : 1u);
}

}  // namespace
}  // namespace memd::heap
