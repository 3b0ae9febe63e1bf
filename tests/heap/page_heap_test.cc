#include "heap/page_heap.h"
#include "heap/region_format.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "disciplines/anonymous.h"
#include "heap/inspect.h"

namespace memd::heap {
namespace {

class PageHeapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(source_.reserve(size_t{1} << 30));
    ASSERT_TRUE(region_format(source_, params_, 16, 0x1234567));
    region_ = Region::attach(source_.base());
  }
  void ExpectConsistent() {
    char message[256];
    EXPECT_TRUE(region_check(region_, classes_, message, sizeof message)) << message;
  }
  PageIndex Alloc(uint32_t n, uint32_t align = 1) {
    RunAllocation a = page_heap_alloc(region_, source_, PageCount{n}, PageKind::kHuge, 0, PageCount{align});
    EXPECT_NE(a.first, kNoPage);
    return a.first;
  }
  const PageHeapState& state() const { return region_.header->page_heap; }

  HeapParams params_;
  SizeClasses classes_{params_};
  disciplines::AnonymousSource source_;
  Region region_;
};

TEST_F(PageHeapTest, FormatsAValidEmptyRegion) {
  EXPECT_EQ(region_.header->magic, kRegionMagic);
  EXPECT_EQ(region_.header->version, kFormatVersion);
  EXPECT_EQ(region_.header->page_size, kPageSize);
  EXPECT_EQ(state().committed_pages.load(), 0u);
  ExpectConsistent();
}

TEST_F(PageHeapTest, AllocatesFreshZeroedPagesAndMarksDescriptors) {
  RunAllocation a = page_heap_alloc(region_, source_, PageCount{3}, PageKind::kHuge, 0);
  ASSERT_NE(a.first, kNoPage);
  EXPECT_TRUE(a.zeroed);
  for (uint32_t i = 0; i < 3; ++i) {
    PageDesc d = region_.page(a.first + PageCount{i});
    EXPECT_EQ(d.kind, PageKind::kHuge);
    EXPECT_EQ(d.block, a.first.value);
  }
  EXPECT_EQ(state().in_use_pages, 3u);
  char* p = region_.page_address(a.first);
  for (size_t i = 0; i < 3 * kPageSize; ++i) ASSERT_EQ(p[i], 0);
  ExpectConsistent();
}

TEST_F(PageHeapTest, FreedRunsCoalesceAndAreReusedBeforeGrowing) {
  PageIndex a = Alloc(4), b = Alloc(4), c = Alloc(4);
  uint32_t committed = state().committed_pages.load();
  page_heap_free(region_, a, PageCount{4}, 0);
  page_heap_free(region_, c, PageCount{4}, 0);
  ExpectConsistent();
  page_heap_free(region_, b, PageCount{4}, 0);  // joins both neighbours
  ExpectConsistent();
  EXPECT_EQ(state().dirty_pages, 12u);
  // A dirty run is preferred: the 12 freed pages serve a 12-page request.
  RunAllocation again = page_heap_alloc(region_, source_, PageCount{12}, PageKind::kHuge, 0);
  EXPECT_EQ(again.first, a);
  EXPECT_FALSE(again.zeroed);
  EXPECT_EQ(state().committed_pages.load(), committed);
  ExpectConsistent();
}

// A request no free run fits, with a free run at the top of the committed
// pages: the region grows only by what that run lacks. A dirty top run (the
// pages of a freed buffer, resident) is taken whole with the first fresh
// pages after it, not left aside while the request faults in new ones.
TEST_F(PageHeapTest, AMissGrowsOnlyPastTheFreeRunAtTheTop) {
  PageIndex low = Alloc(4);
  const uint32_t committed = state().committed_pages.load();
  ASSERT_GT(committed, 8u);
  PageIndex top = Alloc(committed - 4);  // up to the top
  ASSERT_EQ(top.value + (committed - 4), committed);
  std::memset(region_.page_address(top), 0x6b, kPageSize);
  page_heap_free(region_, top, PageCount{committed - 4}, 0);
  const uint32_t want = committed + committed / 2;  // more than the dirty run
  RunAllocation a = page_heap_alloc(region_, source_, PageCount{want}, PageKind::kHuge, 0);
  ASSERT_NE(a.first, kNoPage);
  EXPECT_EQ(a.first, top) << "the dirty run at the top was left aside";
  EXPECT_FALSE(a.zeroed);
  EXPECT_EQ(region_.page_address(a.first)[0], 0x6b);
  EXPECT_LT(state().committed_pages.load(), top.value + want + committed / 2) << "grew by the whole request";
  EXPECT_EQ(state().dirty_pages, 0u);
  EXPECT_EQ(state().in_use_pages, 4 + want);
  for (uint32_t i = 0; i < want; ++i) ASSERT_EQ(region_.page(a.first + PageCount{i}).block, a.first.value) << i;
  ExpectConsistent();
  // A clean (fresh) run at the top merges with the new pages.
  const uint32_t now = state().committed_pages.load();
  const uint32_t top_free = now - (a.first.value + want);
  ASSERT_GT(top_free, 0u);
  RunAllocation b = page_heap_alloc(region_, source_, PageCount{top_free + 10}, PageKind::kHuge, 0);
  ASSERT_NE(b.first, kNoPage);
  EXPECT_EQ(b.first.value, a.first.value + want);
  EXPECT_TRUE(b.zeroed);
  ExpectConsistent();
  page_heap_free(region_, low, PageCount{4}, 0);
  page_heap_free(region_, a.first, PageCount{want}, 0);
  page_heap_free(region_, b.first, PageCount{top_free + 10}, 0);
  EXPECT_EQ(state().in_use_pages, 0u);
  ExpectConsistent();
}

TEST_F(PageHeapTest, AlignedRunsStartOnTheAlignment) {
  Alloc(1);
  for (uint32_t align : {2u, 8u, 64u, 512u}) {
    PageIndex p = Alloc(3, align);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(region_.page_address(p)) % (align * kPageSize), 0u) << align;
    ExpectConsistent();
  }
}

TEST_F(PageHeapTest, ExtendsInPlaceIntoAFreeSuccessorAndShrinks) {
  PageIndex a = Alloc(2), b = Alloc(6);
  Alloc(1);
  page_heap_free(region_, b, PageCount{6}, 0);
  bool zeroed = true;
  EXPECT_TRUE(page_heap_extend(region_, source_, a, PageCount{2}, PageCount{5}, &zeroed));
  EXPECT_FALSE(zeroed);
  EXPECT_EQ(region_.block(a).pages.value, 5u);
  ExpectConsistent();
  EXPECT_FALSE(page_heap_extend(region_, source_, a, PageCount{5}, PageCount{10}, &zeroed));
  page_heap_shrink(region_, a, PageCount{5}, PageCount{1}, 0);
  EXPECT_EQ(region_.block(a).pages.value, 1u);
  ExpectConsistent();
}

TEST_F(PageHeapTest, PurgeTakesOldestDirtyRunsAboveTheLimitAndReturnsThemClean) {
  std::vector<PageIndex> runs;
  for (int i = 0; i < 8; ++i) runs.push_back(Alloc(4));
  Alloc(1);  // keeps the last run from joining the clean top
  for (int i = 0; i < 8; i += 2) page_heap_free(region_, runs[i], PageCount{4}, 100 + i);
  EXPECT_EQ(state().dirty_pages, 16u);
  PurgeBatch batch;
  page_heap_select_purge(region_, 110, /*limit_pages=*/8, /*decay_ms=*/1000, &batch);
  ASSERT_EQ(batch.count, 2u);
  EXPECT_EQ(batch.first[0], runs[0]);  // oldest first
  EXPECT_EQ(batch.first[1], runs[2]);
  EXPECT_EQ(state().dirty_pages, 8u);
  ExpectConsistent();
  for (uint32_t i = 0; i < batch.count; ++i) {
    ASSERT_TRUE(source_.discard(data_offset_of(region_, batch.first[i]), batch.pages[i].bytes()));
  }
  page_heap_finish_purge(region_, &batch);
  ExpectConsistent();
  EXPECT_EQ(state().discard_calls, 2u);
  // Decay: everything older than 5 ms at t=200 goes, whatever the limit.
  PurgeBatch decayed;
  page_heap_select_purge(region_, 200, 1000, 5, &decayed);
  EXPECT_EQ(decayed.count, 2u);
  page_heap_finish_purge(region_, &decayed);
  EXPECT_EQ(state().dirty_pages, 0u);
  ExpectConsistent();
}

TEST_F(PageHeapTest, DiscardedPagesReadAsZeroWhenReused) {
  PageIndex a = Alloc(2);
  Alloc(1);
  std::memset(region_.page_address(a), 0x5a, 2 * kPageSize);
  page_heap_free(region_, a, PageCount{2}, 0);
  PurgeBatch batch;
  page_heap_select_purge(region_, 0, 0, 0, &batch);
  ASSERT_EQ(batch.count, 1u);
  ASSERT_TRUE(source_.discard(data_offset_of(region_, batch.first[0]), batch.pages[0].bytes()));
  page_heap_finish_purge(region_, &batch);
  RunAllocation again = page_heap_alloc(region_, source_, PageCount{2}, PageKind::kHuge, 0);
  EXPECT_TRUE(again.zeroed);
  for (size_t i = 0; i < 2 * kPageSize; ++i) ASSERT_EQ(region_.page_address(again.first)[i], 0);
}

TEST_F(PageHeapTest, FailsWithEnomemPastTheReservation) {
  errno = 0;
  RunAllocation a = page_heap_alloc(region_, source_, PageCount{region_.header->max_pages + 1},
                                    PageKind::kHuge, 0);
  EXPECT_EQ(a.first, kNoPage);
  EXPECT_EQ(errno, ENOMEM);
  ExpectConsistent();
}

TEST_F(PageHeapTest, RandomAllocFreeKeepsEveryInvariant) {
  std::mt19937 rng(7);
  std::vector<std::pair<PageIndex, uint32_t>> live;
  for (int step = 0; step < 4000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      uint32_t n = 1 + rng() % (rng() % 8 == 0 ? 300 : 9);
      uint32_t align = rng() % 10 == 0 ? 16 : 1;
      live.push_back({Alloc(n, align), n});
    } else {
      size_t i = rng() % live.size();
      page_heap_free(region_, live[i].first, PageCount{live[i].second}, step);
      live[i] = live.back();
      live.pop_back();
    }
    if (step % 97 == 0) {
      PurgeBatch batch;
      page_heap_select_purge(region_, step, 64, 1000, &batch);
      page_heap_finish_purge(region_, &batch);
    }
    if (step % 50 == 0) ExpectConsistent();
  }
  ExpectConsistent();
}

TEST_F(PageHeapTest, ASmallRequestTakesAFittingCleanRunBeforeCuttingALongDirtyOne) {
  PageIndex small = Alloc(4);
  Alloc(1);
  PageIndex long_run = Alloc(400);
  Alloc(1);
  page_heap_free(region_, small, PageCount{4}, 0);
  PurgeBatch batch;  // the 4 free pages become a clean run
  page_heap_select_purge(region_, 0, 0, 0, &batch);
  ASSERT_EQ(batch.count, 1u);
  page_heap_finish_purge(region_, &batch);
  page_heap_free(region_, long_run, PageCount{400}, 0);  // dirty
  EXPECT_EQ(Alloc(4), small);
  EXPECT_EQ(region_.block(long_run).pages.value, 400u) << "the long dirty run was cut";
  // A dirty run of the same fit still wins over a clean one.
  EXPECT_EQ(Alloc(400), long_run);
  ExpectConsistent();
}

// The page heap's books are in memory every client of a shared region maps
// writable. Whatever a client writes over its links, lengths and bins, the
// page heap (run by the daemon) must stay inside its tables and its mapping
// and end every operation: it may lose the region's consistency (check
// reports it), never the process. Out-of-table writes crash this test (or
// are reported by the ASan build); every run the heap hands out or purges
// must lie inside the reservation.
TEST_F(PageHeapTest, WhateverAClientWritesOverTheBooksStaysInsideTheTables) {
  std::mt19937 rng(11);
  const uint32_t limit = region_.page_limit();
  auto garbage = [&]() -> uint32_t {
    switch (rng() % 6) {
      case 0: return 0;
      case 1: return UINT32_MAX - rng() % 4;
      case 2: return limit - rng() % 3;
      case 3: return limit + rng() % 1000;
      case 4: return rng() % 64;
      default: return static_cast<uint32_t>(rng());
    }
  };
  auto inside = [&](PageIndex first, PageCount n) {
    return first.value < limit && n.value >= 1 && n.value <= limit - first.value;
  };
  std::vector<std::pair<PageIndex, uint32_t>> live;
  for (int step = 0; step < 5000; ++step) {
    uint32_t committed = std::min(state().committed_pages.load(), limit);
    switch (rng() % 8) {
      case 0: {  // a write over the header's bins or LRU ends
        PageHeapState& s = region_.header->page_heap;
        RunBins& bins = rng() % 2 ? s.dirty : s.clean;
        switch (rng() % 4) {
          case 0: bins.head[rng() % kRunBins].value = garbage(); break;
          case 1: bins.nonempty[rng() % kRunBinWords] = uint64_t{rng()} << 32 | rng(); break;
          case 2: s.lru_oldest.value = garbage(); break;
          default: s.lru_newest.value = garbage(); break;
        }
        break;
      }
      case 1: {  // a write over a descriptor of a committed page
        if (committed == 0) break;
        PageIndex p{static_cast<uint32_t>(rng() % committed)};
        BlockDesc& b = region_.block(p);
        switch (rng() % 7) {
          case 0: b.pages.value = garbage(); break;
          case 1: b.prev.value = garbage(); break;
          case 2: b.next.value = garbage(); break;
          case 3: b.lru.prev.value = garbage(); break;
          case 4: b.lru.next.value = garbage(); break;
          case 5: b.run_state = static_cast<uint8_t>(rng()); break;
          default: {
            PageDesc d = region_.page(p);
            d.block = garbage();
            region_.set_page(p, d);
            break;
          }
        }
        break;
      }
      case 2:
      case 3:
      case 4: {
        uint32_t n = 1 + rng() % (rng() % 8 == 0 ? 300 : 9);
        RunAllocation a = page_heap_alloc(region_, source_, PageCount{n}, PageKind::kHuge, 0,
                                          PageCount{rng() % 10 == 0 ? 16u : 1u});
        if (a.first == kNoPage) break;
        ASSERT_TRUE(inside(a.first, PageCount{n})) << "run at page " << a.first.value << " of " << n;
        live.push_back({a.first, n});
        break;
      }
      case 5:
      case 6: {
        if (live.empty()) break;
        size_t i = rng() % live.size();
        // Freed at the length the caller knows, or at one a client wrote.
        PageCount n{rng() % 4 == 0 ? garbage() : live[i].second};
        page_heap_free(region_, live[i].first, n, step);
        live[i] = live.back();
        live.pop_back();
        break;
      }
      default: {
        PurgeBatch batch;
        page_heap_select_purge(region_, step, rng() % 64, 1000, &batch);
        for (uint32_t i = 0; i < batch.count; ++i) {
          ASSERT_TRUE(inside(batch.first[i], batch.pages[i])) << "purge of page " << batch.first[i].value;
        }
        page_heap_finish_purge(region_, &batch);
        for (uint32_t i = 0; i < batch.count; ++i) {
          ASSERT_TRUE(inside(batch.first[i], batch.pages[i])) << "merged run at page " << batch.first[i].value;
        }
        break;
      }
    }
  }
  // The books are garbage by now; check says so rather than crashing.
  char message[256];
  (void)region_check(region_, classes_, message, sizeof message);
  // And discarding everything dirty (compaction, or an allocation that
  // found no run) still ends.
  for (int round = 0;; ++round) {
    ASSERT_LT(round, 10000) << "purging never ran out of dirty runs";
    PurgeBatch batch;
    page_heap_select_purge(region_, 6000, 0, 0, &batch);
    if (batch.count == 0) break;
    page_heap_finish_purge(region_, &batch);
  }
}

// A run's LRU links are client-writable. One that names another page as its
// predecessor while it is the oldest leaves the LRU's end on it after it is
// purged (lru_remove believes the link); selecting it again would discard
// it again, for ever, and an owner purging everything would never return.
TEST_F(PageHeapTest, APurgedRunWhoseLinksWereOverwrittenIsNotPurgedAgain) {
  PageIndex a = Alloc(4), keep = Alloc(1), b = Alloc(4), keep2 = Alloc(1);
  page_heap_free(region_, a, PageCount{4}, 1);
  page_heap_free(region_, b, PageCount{4}, 2);
  ASSERT_EQ(state().lru_oldest, a);
  region_.block(a).lru.prev = keep;  // a client's write
  int rounds = 0;
  for (; rounds < 100; ++rounds) {
    PurgeBatch batch;
    page_heap_select_purge(region_, 10, 0, 0, &batch);
    if (batch.count == 0) break;
    page_heap_finish_purge(region_, &batch);
  }
  EXPECT_LT(rounds, 100);
  EXPECT_EQ(state().dirty_pages, 0u);
  (void)keep2;
}

}  // namespace
}  // namespace memd::heap
