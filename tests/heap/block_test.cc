#include "heap/block.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "heap/params.h"
#include "heap/remote_free.h"

namespace memd::heap {
namespace {

class BlockTest : public ::testing::Test {
 protected:
  void SetUp() override { block_init(b_, 4, kEnd, /*zeroed=*/true); }
  static constexpr uint32_t kSize = 32;
  static constexpr uint32_t kEnd = 4096 / kSize * kSize;
  alignas(4096) char base_[4096] = {};
  BlockDesc b_{};
};

TEST_F(BlockTest, BumpsThroughTheBlockThenReusesItsFreeList) {
  std::vector<char*> got;
  while (char* p = block_pop(b_, base_, kSize)) got.push_back(p);
  ASSERT_EQ(got.size(), kEnd / kSize);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], base_ + i * kSize);
  EXPECT_EQ(b_.used, kEnd / kSize);
  // Freed objects come back last-in first-out.
  block_push_local(b_, got[3], 3 * kSize, 0x55);
  block_push_local(b_, got[7], 7 * kSize, 0x66);
  EXPECT_EQ(block_pop(b_, base_, kSize), got[7]);
  EXPECT_EQ(block_pop(b_, base_, kSize), got[3]);
  EXPECT_EQ(tag_of(got[3]), 0u);  // handing out clears the free tag
}

TEST_F(BlockTest, CollectsRemoteFreesOntoTheLocalList) {
  char* a = block_pop(b_, base_, kSize);
  char* c = block_pop(b_, base_, kSize);
  EXPECT_TRUE(remote_push(b_, a, 0));
  EXPECT_FALSE(remote_push(b_, c, kSize));  // not the first: no new notification
  EXPECT_EQ(block_collect_remote(b_, base_), 2u);
  EXPECT_EQ(b_.used, 0u);
  EXPECT_EQ(b_.remote.load(), 0u);
  EXPECT_TRUE(block_object_is_free(b_, base_, 0));
  EXPECT_TRUE(block_object_is_free(b_, base_, kSize));
}

TEST_F(BlockTest, RemoteFreeOfANeverAllocatedObjectIsDropped) {
  block_pop(b_, base_, kSize);
  remote_push(b_, base_ + 10 * kSize, 10 * kSize);  // past the bump pointer
  EXPECT_EQ(block_collect_remote(b_, base_), 0u);
  EXPECT_EQ(b_.free_head, 0u);  // not handed out later from the free list
}

TEST_F(BlockTest, ARemoteListWithACycleIsDroppedWhole) {
  char* a = block_pop(b_, base_, kSize);
  char* c = block_pop(b_, base_, kSize);
  // Two frees of `a` racing past the tag check: a -> c -> a -> ...
  remote_push(b_, a, 0);
  remote_push(b_, c, kSize);
  remote_push(b_, a, 0);
  EXPECT_EQ(block_collect_remote(b_, base_), UINT32_MAX);
  EXPECT_EQ(b_.free_head, 0u);  // nothing reached the free list twice
  EXPECT_EQ(b_.used, 2u);
}


// --- the counted remote list (RemoteList in layout.h) ---

TEST(RemoteListWord, PacksHeadTailAndCountOfTheLargestBlock) {
  const uint32_t last = kMaxBlockPages * 4096 - 8 + 1;  // the last granule of the longest block
  for (RemoteList l : {RemoteList{1, 1, 1}, RemoteList{last, 9, 7}, RemoteList{17, last, kMaxBlockPages * 256}}) {
    RemoteList u = RemoteList::unpack(l.pack());
    EXPECT_EQ(u.head, l.head);
    EXPECT_EQ(u.tail, l.tail);
    EXPECT_EQ(u.count, l.count);
    EXPECT_EQ(RemoteList::head_of(l.pack()), l.head);
  }
  EXPECT_EQ(RemoteList::unpack(0).head, 0u);
  EXPECT_EQ(RemoteList::unpack(0).count, 0u);
}

TEST(RemoteListWord, HeapParametersRefuseBlocksItsLinksCannotCover) {
  HeapParams p;
  p.large_block_pages = kMaxBlockPages;
  EXPECT_TRUE(params_valid(p));
  p.large_block_pages = kMaxBlockPages + 1;
  EXPECT_FALSE(params_valid(p));
  p = HeapParams{};
  p.medium_block_pages = kMaxBlockPages + 1;
  EXPECT_FALSE(params_valid(p));
  p = HeapParams{};
  p.small_block_pages = kMaxBlockPages + 1;
  EXPECT_FALSE(params_valid(p));
}

// A block of several pages in a mapping of its own, every object handed
// out (the bump pointer at the end), so that a test can take pages away
// (PROT_NONE) and prove what collection does not read.
class MappedBlockTest : public ::testing::Test {
 protected:
  static constexpr uint32_t kPages = 4;
  static constexpr uint32_t kSize = 64;
  static constexpr uint32_t kPerPage = 4096 / kSize;
  static constexpr uint32_t kEnd = kPages * 4096;
  static constexpr uint32_t kObjects = kEnd / kSize;
  static constexpr uint64_t kSecret = 0x5ec7e7;

  void SetUp() override {
    void* m = mmap(nullptr, kEnd, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(m, MAP_FAILED);
    base_ = static_cast<char*>(m);
    HandOutEverything();
  }
  void TearDown() override { munmap(base_, kEnd); }

  void HandOutEverything() {
    block_init(b_, kSize / 8, kEnd, /*zeroed=*/false);
    while (block_pop(b_, base_, kSize) != nullptr) {
    }
    ASSERT_EQ(b_.used, kObjects);
  }
  char* obj(uint32_t i) { return base_ + i * kSize; }
  uint32_t link(uint32_t i) { return i * kSize + 1; }
  uint64_t tag(uint32_t i) { return free_tag(kSecret, i * kSize); }
  RemoteFree FreeRemote(uint32_t i) { return block_free_remote(b_, obj(i), i * kSize, tag(i)); }
  void FreeLocal(uint32_t i) { block_push_local(b_, obj(i), i * kSize, tag(i)); }
  // Makes pages [first, first + n) of the block unreadable (or readable again).
  void Protect(uint32_t first, uint32_t n, bool none) {
    ASSERT_EQ(mprotect(base_ + first * 4096, n * 4096, none ? PROT_NONE : PROT_READ | PROT_WRITE), 0);
  }
  // The object indexes the free list hands out from now on, in order
  // (bounded: a cycle shows as more objects than the block has).
  std::vector<uint32_t> Drain() {
    std::vector<uint32_t> got;
    while (b_.free_head != 0 && got.size() <= kObjects) {
      got.push_back(static_cast<uint32_t>((block_pop(b_, base_, kSize) - base_) / kSize));
    }
    return got;
  }
  void SetWord(RemoteList l) { b_.remote.store(l.pack()); }

  char* base_ = nullptr;
  BlockDesc b_{};
};

TEST_F(MappedBlockTest, PushesFromSeveralThreadsLeaveTheRightHeadTailAndCount) {
  constexpr uint32_t kThreads = 4;
  std::atomic<int> firsts{0}, refused{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      while (!go.load()) {
      }
      for (uint32_t i = t; i < kObjects; i += kThreads) {
        RemoteFree r = FreeRemote(i);
        if (r == RemoteFree::kPushedFirst) firsts.fetch_add(1);
        if (r == RemoteFree::kAlreadyFree) refused.fetch_add(1);
      }
    });
  }
  go.store(true);
  for (auto& t : threads) t.join();
  EXPECT_EQ(firsts.load(), 1);  // one notification for the whole list
  EXPECT_EQ(refused.load(), 0);
  RemoteList l = RemoteList::unpack(b_.remote.load());
  EXPECT_EQ(l.count, kObjects);
  // From the head (the last push) to the tail (the first), every object once.
  std::vector<bool> seen(kObjects);
  uint32_t n = 0, last = 0;
  for (uint32_t h = l.head; h != 0 && n <= kObjects; h = link_of(base_ + h - 1), ++n) {
    ASSERT_EQ((h - 1) % kSize, 0u);
    ASSERT_FALSE(seen[(h - 1) / kSize]) << "object " << (h - 1) / kSize << " twice on the list";
    seen[(h - 1) / kSize] = true;
    last = h;
  }
  EXPECT_EQ(n, kObjects);
  EXPECT_EQ(l.tail, last);
  EXPECT_EQ(block_collect_remote(b_, base_), kObjects);
  EXPECT_EQ(b_.used, 0u);
}

TEST_F(MappedBlockTest, ABlockThatRanOutTakesTheListWholeWithoutReadingIt) {
  // Objects on every page, freed by other threads; the owner's own free
  // list is empty (the block ran out), as when alloc_slow collects it.
  const std::vector<uint32_t> freed = {3, kPerPage + 5, 2 * kPerPage + 7, 3 * kPerPage + 1, kPerPage + 9};
  for (uint32_t i : freed) ASSERT_NE(FreeRemote(i), RemoteFree::kAlreadyFree);
  Protect(0, kPages, true);  // a walk would fault at its first object
  uint32_t n = block_collect_remote(b_, base_);
  Protect(0, kPages, false);
  EXPECT_EQ(n, freed.size());
  EXPECT_EQ(b_.used, kObjects - freed.size());
  EXPECT_EQ(b_.remote.load(), 0u);
  EXPECT_EQ(b_.free_head, link(freed.back()));
  // Handed out again, last freed first, each once.
  EXPECT_EQ(Drain(), std::vector<uint32_t>(freed.rbegin(), freed.rend()));
  EXPECT_EQ(b_.used, kObjects);
}

TEST_F(MappedBlockTest, WithALocalFreeListOnlyTheTailIsTouched) {
  FreeLocal(kPerPage + 1);
  FreeLocal(2 * kPerPage + 2);  // the local list: 2P+2, P+1
  ASSERT_NE(FreeRemote(4), RemoteFree::kAlreadyFree);  // the first push: the tail, on page 0
  ASSERT_NE(FreeRemote(3 * kPerPage + 3), RemoteFree::kAlreadyFree);
  ASSERT_NE(FreeRemote(kPerPage + 6), RemoteFree::kAlreadyFree);
  Protect(1, kPages - 1, true);  // everything but the tail's page
  uint32_t n = block_collect_remote(b_, base_);
  Protect(1, kPages - 1, false);
  EXPECT_EQ(n, 3u);
  EXPECT_EQ(b_.used, kObjects - 5);
  // The remote list in front of the local one.
  std::vector<uint32_t> want = {kPerPage + 6, 3 * kPerPage + 3, 4, 2 * kPerPage + 2, kPerPage + 1};
  EXPECT_EQ(Drain(), want);
}

TEST_F(MappedBlockTest, ABlockStillBumpingIsWalkedAndDropsWhatWasNeverHandedOut) {
  block_init(b_, kSize / 8, kEnd, /*zeroed=*/false);
  for (int i = 0; i < 10; ++i) block_pop(b_, base_, kSize);
  ASSERT_NE(FreeRemote(2), RemoteFree::kAlreadyFree);
  ASSERT_NE(FreeRemote(40), RemoteFree::kAlreadyFree);  // past the bump pointer: never handed out
  ASSERT_NE(FreeRemote(7), RemoteFree::kAlreadyFree);
  EXPECT_EQ(block_collect_remote(b_, base_), 2u);
  EXPECT_EQ(b_.used, 8u);
  std::vector<uint32_t> got = Drain();
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<uint32_t>{2, 7}));
}

TEST_F(MappedBlockTest, ACountThatCannotBeTrueFallsBackToTheCheckedWalk) {
  const std::vector<uint32_t> freed = {11, 12, 13};
  for (uint32_t i : freed) FreeRemote(i);
  RemoteList l = RemoteList::unpack(b_.remote.load());
  // More objects than are out, more than the block holds, none at all, a
  // head or tail outside the block: each is walked and found to hold 3.
  for (RemoteList bad : {RemoteList{l.head, l.tail, kObjects + 1}, RemoteList{l.head, l.tail, RemoteList::kMaxCount},
                         RemoteList{l.head, l.tail, 0}, RemoteList{l.head, kEnd + 1, 3},
                         RemoteList{l.head, 0, 3}}) {
    HandOutEverything();
    for (uint32_t i : freed) FreeRemote(i);
    if (bad.count == kObjects + 1) FreeLocal(20);  // used below the count
    uint32_t used = b_.used;
    SetWord(bad);
    EXPECT_EQ(block_collect_remote(b_, base_), 3u) << bad.count << " " << bad.tail;
    EXPECT_EQ(b_.used, used - 3);
    std::vector<uint32_t> got = Drain();
    EXPECT_EQ(std::vector<uint32_t>(got.begin(), got.begin() + 3), (std::vector<uint32_t>{13, 12, 11}));
  }
}

TEST_F(MappedBlockTest, ATailThatDoesNotEndTheListIsWalkedAndACycleDropped) {
  FreeLocal(30);
  // Pushes that skipped the claim (as two racing frees without it would):
  // 5 -> 6 -> 5 -> ..., whose word says 3 objects with 5 at the tail.
  remote_push(b_, obj(5), 5 * kSize);
  remote_push(b_, obj(6), 6 * kSize);
  remote_push(b_, obj(5), 5 * kSize);
  EXPECT_EQ(RemoteList::unpack(b_.remote.load()).count, 3u);
  uint32_t used = b_.used;
  EXPECT_EQ(block_collect_remote(b_, base_), UINT32_MAX);
  EXPECT_EQ(b_.used, used);  // dropped whole: leaked, never handed out
  EXPECT_EQ(Drain(), std::vector<uint32_t>{30});
}

// Two threads free the same objects at the same instants, past their tag
// checks: of each pair of frees exactly one may push the object; the other
// must be told it was a double free. Without the claim both can push it:
// the list cycles through it, and once the block has run out its list would
// be taken whole and the object handed out over and over. Both threads free
// every object of the block in the same order, meeting at a barrier before
// each, so that each object's two frees come within a cache-line transfer
// of each other.
TEST_F(MappedBlockTest, RacingDoubleFreesPushEachObjectOnce) {
  constexpr int kRounds = 400;
  std::atomic<int> round{-1}, done{0}, pushed{0}, refused{0};
  std::atomic<uint32_t> arrived{0};
  auto racer = [&] {
    for (int seen = -1;;) {
      int r;
      for (int spins = 0; (r = round.load(std::memory_order_acquire)) == seen; ++spins) {
        if (spins % 1024 == 1023) std::this_thread::yield();
      }
      if (r == kRounds) return;
      seen = r;
      for (uint32_t i = 0; i < kObjects; ++i) {
        uint32_t want = 2 * (r * kObjects + i + 1);
        arrived.fetch_add(1, std::memory_order_acq_rel);
        for (int spins = 0; arrived.load(std::memory_order_acquire) < want; ++spins) {
          if (spins % 1024 == 1023) std::this_thread::yield();
        }
        if (FreeRemote(i) == RemoteFree::kAlreadyFree) refused.fetch_add(1, std::memory_order_relaxed);
        else pushed.fetch_add(1, std::memory_order_relaxed);
      }
      done.fetch_add(1, std::memory_order_acq_rel);
    }
  };
  std::thread a(racer), c(racer);
  int failures = 0;
  for (int r = 0; r < kRounds && failures < 5; ++r) {
    HandOutEverything();
    done.store(0);
    pushed.store(0);
    refused.store(0);
    round.store(r, std::memory_order_release);
    while (done.load(std::memory_order_acquire) != 2) std::this_thread::yield();
    uint32_t n = block_collect_remote(b_, base_);
    std::vector<uint32_t> got = Drain();
    std::sort(got.begin(), got.end());
    bool each_once = got.size() == kObjects && std::adjacent_find(got.begin(), got.end()) == got.end();
    if (pushed.load() != static_cast<int>(kObjects) || n != kObjects || !each_once || b_.used != kObjects) {
      ++failures;
      ADD_FAILURE() << "round " << r << ": " << pushed.load() << " frees pushed (of " << kObjects
                    << " objects), " << n << " collected, " << got.size() << " handed out again"
                    << (std::adjacent_find(got.begin(), got.end()) != got.end() ? ", some twice" : "");
    }
  }
  round.store(kRounds, std::memory_order_release);
  a.join();
  c.join();
}

}  // namespace
}  // namespace memd::heap
