// Recovery from the states a crash can leave, made on purpose: a thread heap
// that never detached (with a kept huge run and quick-cached chunks), a block
// half marked by the page heap, a block leased and never initialized, a
// count off by one, a broken free list, a large block with a garbage chunk
// header or a stale free one. After region_recover the region check passes and every object
// that was live is intact and still allocated.
#include "heap/recovery.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <vector>

#include "region/thread_heap_pool.h"
#include "region/page_heap_owner.h"
#include "disciplines/anonymous.h"
#include "heap/block.h"
#include "heap/large_heap.h"
#include "heap/region_format.h"
#include "tests/heap/thread_heap_fixture.h"

namespace memd::heap {
namespace {

class RecoveryTest : public ThreadHeapFixture {
 protected:

  struct Obj {
    char* p;
    size_t size;
  };
  Obj make(size_t size, char fill) {
    auto* p = static_cast<char*>(heap_->alloc(size));
    EXPECT_NE(p, nullptr);
    std::memset(p, fill, size);
    return {p, size};
  }
  // The crash: the thread heap is simply forgotten. Recovery runs as the
  // next owner's open would.
  RecoveryReport recover() {
    RecoveryReport report;
    region_recover(r(), pages_.classes(), source_, [this](PageIndex b) { kept_.push_back(b); }, &report);
    return report;
  }
  void expect_consistent() {
    char msg[256];
    EXPECT_TRUE(region_check(r(), pages_.classes(), msg, sizeof msg)) << msg;
  }
  // Three large chunks in one block, filled with 'a', 'b' and 'c'.
  std::array<Obj, 3> three_large_chunks() {
    std::array<Obj, 3> o{make(17000, 'a'), make(20000, 'b'), make(24000, 'c')};
    EXPECT_EQ(block_of(o[0].p), block_of(o[2].p));
    return o;
  }
  // Objects live as recovery's walk counts them, not only by their headers.
  uint64_t busy_objects() { return region_stat(r(), pages_.classes()).busy_objects; }
  void expect_live(const Obj& o, char fill) {
    EXPECT_EQ(heap_->validate(o.p), FreeStatus::kOk);
    for (size_t i = 0; i < o.size; ++i) ASSERT_EQ(o.p[i], fill) << i;
  }

  std::vector<PageIndex> kept_;
};

TEST_F(RecoveryTest, AThreadHeapThatNeverDetached) {
  std::vector<Obj> live;
  for (int i = 0; i < 300; ++i) live.push_back(make(16 + (i % 60) * 8, 'a'));
  for (int i = 0; i < 20; ++i) live.push_back(make(2000 + i * 700, 'b'));  // mid-size classes
  for (int i = 0; i < 10; ++i) live.push_back(make(17000 + i * 1500, 'l'));  // large chunks
  live.push_back(make(300000, 'c'));
  // Freed objects of every kind: local free lists, quick-cached chunks, a
  // kept huge run.
  for (int i = 0; i < 100; ++i) heap_->free(make(16 + (i % 60) * 8, 'x').p);
  for (int i = 0; i < 5; ++i) heap_->free(make(3000, 'y').p);
  for (int i = 0; i < 5; ++i) heap_->free(make(20000, 'y').p);
  heap_->free(make(200000, 'z').p);
  RecoveryReport rep = recover();
  EXPECT_EQ(rep.leaked_objects, 0u);
  EXPECT_EQ(rep.huge_live, 1u);
  expect_consistent();
  RegionStats s = region_stat(r(), pages_.classes());
  EXPECT_EQ(s.busy_objects, live.size());
  for (const Obj& o : live) expect_live(o, o.p[0]);
  // Every block still holding objects is ownerless and handed to the caller.
  for (PageIndex b : kept_) EXPECT_EQ(r().block(b).owner_word.load(), 0u);
}

TEST_F(RecoveryTest, ABlockHalfMarkedByThePageHeapIsFree) {
  Obj keep = make(100, 'k');
  // Take a run and write every descriptor but the first page's, as a crash
  // inside the page heap's marking would leave it.
  RunAllocation run = page_heap_alloc(r(), source_, PageCount{4}, PageKind::kSegregated, 20);
  ASSERT_NE(run.first, kNoPage);
  r().set_page(run.first, {run.first.value, 0, PageKind::kFree, 0});
  RecoveryReport rep = recover();
  expect_consistent();
  for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(r().page(run.first + PageCount{i}).kind, PageKind::kFree) << i;
  expect_live(keep, 'k');
  EXPECT_EQ(rep.leaked_objects, 0u);
}

TEST_F(RecoveryTest, ALeasedBlockNeverInitializedIsReleased) {
  RunAllocation run = page_heap_alloc(r(), source_, PageCount{pages_.classes().info(4).block_pages},
                                      PageKind::kSegregated, 4);
  ASSERT_NE(run.first, kNoPage);
  RunAllocation large = page_heap_alloc(r(), source_, PageCount{20}, PageKind::kLarge, 0);
  ASSERT_NE(large.first, kNoPage);
  std::memset(r().page_address(large.first), 0x5a, 64);  // stale bytes where a chunk header would be
  RecoveryReport rep = recover();
  expect_consistent();
  EXPECT_EQ(rep.blocks_released, 2u);
  EXPECT_EQ(r().page(run.first).kind, PageKind::kFree);
  EXPECT_EQ(r().page(large.first).kind, PageKind::kFree);
}

TEST_F(RecoveryTest, CountsAreRecomputedAndBrokenListsCut) {
  std::vector<Obj> live;
  for (int i = 0; i < 200; ++i) live.push_back(make(48, 'm'));
  for (int i = 0; i < 50; ++i) heap_->free(make(48, 'f').p);
  PageIndex b = block_of(live.back().p);  // the block the 50 were freed into
  BlockDesc& d = r().block(b);
  d.used += 3;  // a crash between taking an object and counting it
  // A link leaving its block, as a half-written free would leave it.
  ASSERT_NE(d.free_head, 0u);
  char* first_free = r().page_address(b) + d.free_head - 1;
  link_of(first_free) = d.end + 4096;
  RecoveryReport rep = recover();
  EXPECT_GE(rep.leaked_objects, 1u);
  expect_consistent();
  for (const Obj& o : live) expect_live(o, 'm');
}

TEST_F(RecoveryTest, AStaleLinkNamingALiveObjectDoesNotFreeIt) {
  // After a power cut, a block's descriptor can come back newer than the
  // page holding its objects. Made here: two objects freed (list b -> a),
  // both handed out again (their links stay in their bytes), and the
  // descriptor's free list head put back on b, as an older descriptor
  // would have it. Live objects carry no free tag: the list is cut at b.
  std::vector<char*> objs = same_block(48, 4);
  char* a = objs[1];
  char* b = objs[2];
  heap_->free(a);
  heap_->free(b);
  ASSERT_EQ(heap_->alloc(48), b);
  ASSERT_EQ(heap_->alloc(48), a);
  std::memset(a, 'a', 8);  // the program's bytes over the link, not the tag word
  BlockDesc& d = r().block(block_of(b));
  d.free_head = in_block(b) + 1;
  RecoveryReport rep = recover();
  EXPECT_EQ(rep.leaked_objects, 1u);
  expect_consistent();
  EXPECT_EQ(heap_->validate(a), FreeStatus::kOk);
  EXPECT_EQ(heap_->validate(b), FreeStatus::kOk);
  EXPECT_EQ(d.free_head, 0u);
  EXPECT_EQ(d.used, 4u);
}

TEST_F(RecoveryTest, AStaleRemoteListNamingALiveObjectDoesNotFreeIt) {
  // The same on the remote list: after a power cut, the descriptor's remote
  // word can name an object whose page came back older than the remote free
  // that pushed it, so that the object holds a program's live bytes, and
  // those, read as a link, name another live object. An object on a remote
  // list always carries its free tag (the free swaps it in before the
  // push): one without ends the walk, and nothing it names is freed.
  std::vector<char*> objs = same_block(48, 4);
  char* b = objs[1];
  char* c = objs[2];
  uint32_t link = in_block(c) + 1;
  std::memcpy(b, &link, sizeof link);  // the program's bytes, read as a link to c
  BlockDesc& d = r().block(block_of(b));
  d.remote.store(RemoteList{in_block(b) + 1, in_block(b) + 1, 1}.pack());
  RecoveryReport rep = recover();
  EXPECT_EQ(rep.leaked_objects, 1u);
  expect_consistent();
  EXPECT_EQ(heap_->validate(b), FreeStatus::kOk) << "b was never freed as far as its page says";
  EXPECT_EQ(heap_->validate(c), FreeStatus::kOk) << "c is live: a stale link must not free it";
  EXPECT_EQ(d.used, 4u);
}

TEST_F(RecoveryTest, ALargeBlockWithAGarbageChunkKeepsWhatPrecedesIt) {
  Obj a = make(17000, 'a');
  Obj b = make(20000, 'b');
  Obj c = make(24000, 'c');
  // Damage c's header: the walk stops there; a and b survive.
  auto* h = reinterpret_cast<ChunkHeader*>(c.p) - 1;
  h->size = 3;
  RecoveryReport rep = recover();
  EXPECT_EQ(rep.leaked_objects, 1u);
  expect_consistent();
  expect_live(a, 'a');
  expect_live(b, 'b');
  EXPECT_NE(heap_->validate(c.p), FreeStatus::kOk);
}

TEST_F(RecoveryTest, ALargeChunkPastAGarbageHeaderSurvives) {
  auto [a, b, c] = three_large_chunks();
  // b's header as a power cut can leave it (its page never written back):
  // the memory up to c is free, and c is found past it.
  auto* h = reinterpret_cast<ChunkHeader*>(b.p) - 1;
  std::memset(h, 0x5a, sizeof *h);
  RecoveryReport rep = recover();
  EXPECT_EQ(rep.leaked_objects, 1u);
  expect_consistent();
  EXPECT_EQ(busy_objects(), 2u);
  expect_live(a, 'a');
  expect_live(c, 'c');
  EXPECT_NE(heap_->validate(b.p), FreeStatus::kOk);
}

// A free header is not trusted for its length: after a power cut it can be
// older than the chunks after it. Here the block's first header says one
// free chunk runs over two live ones (the front of a split written back,
// the rest's headers not yet): both stay live.
TEST_F(RecoveryTest, AStaleFreeHeaderRunningOverLiveChunksDoesNotHideThem) {
  auto [a, b, c] = three_large_chunks();
  auto* ha = reinterpret_cast<ChunkHeader*>(a.p) - 1;
  auto* hc = reinterpret_cast<ChunkHeader*>(c.p) - 1;
  ha->size = static_cast<uint32_t>(reinterpret_cast<char*>(hc) + hc->size - reinterpret_cast<char*>(ha));
  __atomic_store_n(&ha->state, kChunkFree, __ATOMIC_RELEASE);
  RecoveryReport rep = recover();
  EXPECT_EQ(rep.leaked_objects, 0u);
  expect_consistent();
  EXPECT_EQ(busy_objects(), 2u);
  expect_live(b, 'b');
  expect_live(c, 'c');
  EXPECT_NE(heap_->validate(a.p), FreeStatus::kOk);
}

// Chunks of two moments of a block can leave a gap of one granule between
// them, too short for a chunk of its own: the chunk before takes it.
TEST_F(RecoveryTest, AGapOfOneGranuleBetweenChunksJoinsTheChunkBefore) {
  auto [a, b, c] = three_large_chunks();
  auto* ha = reinterpret_cast<ChunkHeader*>(a.p) - 1;
  const uint32_t a_size = ha->size;
  ha->size -= kChunkAlign;  // the granule left holds a's bytes: no header
  recover();
  expect_consistent();
  EXPECT_EQ(ha->size, a_size);
  expect_live(a, 'a');
  expect_live(b, 'b');
  expect_live(c, 'c');
}

TEST_F(RecoveryTest, RemoteFreesInFlightStayUntilTheyArrive) {
  Obj a = make(17000, 'a');
  Obj b = make(17000, 'b');
  PageIndex blk = block_of(a.p);
  // b was claimed by a remote free whose push has not happened yet.
  ASSERT_EQ(LargeHeap::claim_remote(r(), r().header->secret, blk, b.p), LargeFreeResult::kFreed);
  recover();
  expect_consistent();
  expect_live(a, 'a');
  // b is neither free nor live until its push arrives.
  auto* hb = reinterpret_cast<ChunkHeader*>(b.p) - 1;
  EXPECT_EQ(hb->state, kChunkRemote);
}

}  // namespace
}  // namespace memd::heap
