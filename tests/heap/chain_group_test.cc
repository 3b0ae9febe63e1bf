// Call-chain pools in the thread heap (ThreadHeap::alloc_grouped): each
// group's objects come from blocks of their own, which free, remote free,
// compaction and thread exit treat like the heap's other blocks.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "tests/heap/thread_heap_fixture.h"

namespace memd::heap {
namespace {

class ChainGroupTest : public ThreadHeapFixture {
 protected:
  uint8_t group_of_block(const void* p) const { return r().block(block_of(p)).chain_group; }
  // A sampled allocation (heap profiling) is a chunk of a large block, of
  // no group: the tests skip those.
  bool segregated(const void* p) const {
    return r().page(PageIndex{static_cast<uint32_t>(r().offset_of(p) >> kPageShift)}).kind == PageKind::kSegregated;
  }
};

TEST_F(ChainGroupTest, EachGroupsObjectsComeFromBlocksOfTheirOwn) {
  // Interleaved, as a program builds two lists while allocating other things.
  std::map<uint32_t, std::set<uint32_t>> blocks;  // group (0: plain) -> blocks
  std::map<uint32_t, std::vector<char*>> objs;
  for (int i = 0; i < 3000; ++i) {
    for (uint32_t g : {0u, 1u, 2u, 0u, 7u}) {
      char* p = static_cast<char*>(g == 0 ? heap_->alloc(48) : heap_->alloc_grouped(48, g));
      ASSERT_NE(p, nullptr);
      objs[g].push_back(p);
      if (!segregated(p)) continue;
      blocks[g].insert(block_of(p).value);
      EXPECT_EQ(group_of_block(p), g);
    }
  }
  for (auto& [g, set] : blocks) {
    for (auto& [h, other] : blocks) {
      if (g == h) continue;
      for (uint32_t b : set) EXPECT_EQ(other.count(b), 0u) << "block " << b << " serves groups " << g << " and " << h;
    }
  }
  // Within a group, consecutive allocations from a fresh block are adjacent.
  size_t adjacent = 0;
  for (size_t i = 1; i < objs[1].size(); ++i) adjacent += objs[1][i] == objs[1][i - 1] + 48;
  EXPECT_GT(adjacent, objs[1].size() * 9 / 10);
  for (auto& [g, v] : objs) {
    for (char* p : v) ASSERT_EQ(heap_->free(p), FreeStatus::kOk);
  }
  heap_->release_empty();
  expect_consistent();
}

TEST_F(ChainGroupTest, GroupZeroBigSizesAndUnknownGroupsTakeThePlainPath) {
  char* plain = static_cast<char*>(heap_->alloc(64));
  char* zero = static_cast<char*>(heap_->alloc_grouped(64, 0));
  char* unknown = static_cast<char*>(heap_->alloc_grouped(64, ThreadHeap::kMaxChainGroups + 1));
  char* big = static_cast<char*>(heap_->alloc_grouped(ThreadHeap::kChainGroupMaxSize + 8, 3));
  ASSERT_TRUE(plain && zero && unknown && big);
  if (segregated(plain) && segregated(zero)) {
    EXPECT_EQ(block_of(zero), block_of(plain));
  }
  if (segregated(plain) && segregated(unknown)) {
    EXPECT_EQ(block_of(unknown), block_of(plain));
  }
  EXPECT_EQ(group_of_block(big), 0);
  char* grouped = static_cast<char*>(heap_->alloc_grouped(ThreadHeap::kChainGroupMaxSize, 3));
  if (segregated(grouped)) {
    EXPECT_EQ(group_of_block(grouped), 3);
  }
  for (char* p : {plain, zero, unknown, big, grouped}) ASSERT_EQ(heap_->free(p), FreeStatus::kOk);
  expect_consistent();
}

TEST_F(ChainGroupTest, RemoteFreesOfGroupObjectsComeBackToTheGroup) {
  ThreadHeap* other = pool_.attach_thread();
  ASSERT_NE(other, nullptr);
  std::vector<char*> objs;
  for (int i = 0; i < 5000; ++i) objs.push_back(static_cast<char*>(heap_->alloc_grouped(32, 5)));
  std::set<uint32_t> group_blocks;
  for (char* p : objs) group_blocks.insert(block_of(p).value);
  for (char* p : objs) ASSERT_EQ(other->free(p), FreeStatus::kOk);
  other->flush_remote_frees();
  // The owner takes them back on its slow path; the group reuses its blocks.
  std::vector<char*> again;
  for (int i = 0; i < 5000; ++i) again.push_back(static_cast<char*>(heap_->alloc_grouped(32, 5)));
  size_t reused = 0;
  for (char* p : again) reused += group_blocks.count(block_of(p).value);
  EXPECT_GT(reused, again.size() / 2);
  for (char* p : again) {
    if (segregated(p)) {
      EXPECT_EQ(group_of_block(p), 5);
    }
    ASSERT_EQ(heap_->free(p), FreeStatus::kOk);
  }
  pool_.detach_thread(other);
  heap_->release_empty();
  expect_consistent();
}

TEST_F(ChainGroupTest, EmptyGroupBlocksGoBackAndExitAbandonsAsPlainBlocks) {
  std::vector<char*> objs;
  for (int i = 0; i < 20000; ++i) objs.push_back(static_cast<char*>(heap_->alloc_grouped(24, 2)));
  std::vector<char*> kept;
  for (size_t i = 0; i < objs.size(); ++i) {
    if (i % 1000 == 0) kept.push_back(objs[i]);
    else ASSERT_EQ(heap_->free(objs[i]), FreeStatus::kOk);
  }
  // Emptied blocks (all but the kept objects' and the current one) went back
  // to the page heap as they emptied, or wait in the thread's lookaside
  // (which holds no more than kParkedSlots whatever the number of groups);
  // a compaction gives those back too.
  std::set<uint32_t> before;
  for (char* p : objs) before.insert(block_of(p).value);
  RegionStats st = region_stat(r(), pages_.classes());
  EXPECT_LE(st.segregated_blocks, kept.size() + 2 + ThreadHeap::kParkedSlots) << "of " << before.size() << " blocks";
  heap_->release_empty();
  st = region_stat(r(), pages_.classes());
  EXPECT_LE(st.segregated_blocks, kept.size() + 2) << "of " << before.size() << " blocks";
  // The thread exits with objects live: its group blocks are abandoned as
  // plain blocks, and another heap adopts them for plain allocations.
  ThreadHeap* h = heap_;
  pool_.detach_thread(h);
  heap_ = nullptr;
  for (char* p : kept) EXPECT_EQ(group_of_block(p), 0);
  ThreadHeap* next = pool_.attach_thread();
  ASSERT_NE(next, nullptr);
  for (char* p : kept) ASSERT_EQ(next->free(p), FreeStatus::kOk);
  for (int i = 0; i < 1000; ++i) {
    void* p = next->alloc(24);
    ASSERT_NE(p, nullptr);
    if (segregated(p)) {
      EXPECT_EQ(group_of_block(p), 0);
    }
    ASSERT_EQ(next->free(p), FreeStatus::kOk);
  }
  next->release_empty();
  expect_consistent();
}

TEST_F(ChainGroupTest, RandomMixKeepsEveryObjectIntact) {
  std::mt19937_64 rng(42);
  struct Live {
    unsigned char* p;
    size_t size;
    unsigned char fill;
  };
  std::vector<Live> live;
  ThreadHeap* other = pool_.attach_thread();
  for (int op = 0; op < 300000; ++op) {
    if (live.size() < 4000 && rng() % 3 != 0) {
      size_t size = 1 + rng() % 300;
      uint32_t g = static_cast<uint32_t>(rng() % 6);  // 0: plain
      auto* p = static_cast<unsigned char*>(heap_->alloc_grouped(size, g));
      ASSERT_NE(p, nullptr);
      unsigned char fill = static_cast<unsigned char>(rng());
      std::memset(p, fill, size);
      live.push_back({p, size, fill});
    } else if (!live.empty()) {
      size_t i = rng() % live.size();
      Live l = live[i];
      live[i] = live.back();
      live.pop_back();
      for (size_t k = 0; k < l.size; ++k) ASSERT_EQ(l.p[k], l.fill) << "object " << static_cast<void*>(l.p);
      ThreadHeap* by = rng() % 4 == 0 ? other : heap_;
      ASSERT_EQ(by->free(l.p), FreeStatus::kOk);
    }
  }
  other->flush_remote_frees();
  for (const Live& l : live) ASSERT_EQ(heap_->free(l.p), FreeStatus::kOk);
  pool_.detach_thread(other);
  heap_->release_empty();
  expect_consistent();
}

}  // namespace
}  // namespace memd::heap
