// memd::Heap, Vmalloc's region calls, on one thread.
#include "client/heap.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "heap_fixture.h"
#include "tests/support/large_range.h"
#include "region/diag.h"
#include "heap/sampling.h"

namespace memd {
namespace {

using HeapTest = testing::HeapFixture;

const size_t kSizes[] = {0, 1, 8, 15, 16, 17, 24, 100, 120, 121, 128, 255, 496, 497, 504, 1000,
                         4096, 10000, 32768, 32769, 65536, 100000, 1 << 20, 5 << 20};

TEST_F(HeapTest, EverySizeGetsAtLeastItsBytesAndKeepsItsContents) {
  std::vector<std::pair<unsigned char*, size_t>> objects;
  for (int round = 0; round < 3; ++round) {
    for (size_t size : kSizes) {
      auto* p = static_cast<unsigned char*>(heap_->alloc(size));
      ASSERT_NE(p, nullptr) << size;
      EXPECT_GE(heap_->size(p), size);
      // malloc's alignment (alignof(max_align_t)) at every size.
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 16, 0u) << size;
      std::memset(p, static_cast<int>(size & 0xff), size);
      objects.push_back({p, size});
    }
  }
  for (auto [p, size] : objects) {
    for (size_t i = 0; i < size; ++i) ASSERT_EQ(p[i], static_cast<unsigned char>(size & 0xff)) << size;
    heap_->free(p);
  }
  ExpectConsistent();
}

TEST_F(HeapTest, ObjectsNeverOverlap) {
  std::set<std::pair<uintptr_t, uintptr_t>> ranges;
  std::mt19937 rng(1);
  for (int i = 0; i < 20000; ++i) {
    size_t size = rng() % 3000;
    auto p = reinterpret_cast<uintptr_t>(heap_->alloc(size));
    size_t n = heap_->size(reinterpret_cast<void*>(p));
    auto it = ranges.lower_bound({p, 0});
    if (it != ranges.end()) {
      ASSERT_GE(it->first, p + n);
    }
    if (it != ranges.begin()) {
      ASSERT_LE(std::prev(it)->second, p);
    }
    ranges.insert({p, p + n});
  }
  for (auto [lo, hi] : ranges) heap_->free(reinterpret_cast<void*>(lo));
  ExpectConsistent();
}

TEST_F(HeapTest, SmallObjectsFillBlocksInAllocationOrder) {
  // Reap allocation: a fresh block hands out consecutive objects.
  char* a = static_cast<char*>(heap_->alloc(48));
  char* b = static_cast<char*>(heap_->alloc(48));
  char* c = static_cast<char*>(heap_->alloc(48));
  EXPECT_EQ(b - a, 48);
  EXPECT_EQ(c - b, 48);
  // A freed object is reused first (the block's free list), before bumping.
  heap_->free(b);
  EXPECT_EQ(heap_->alloc(48), b);
  // A size between two classes takes the next multiple of 16.
  char* d = static_cast<char*>(heap_->alloc(40));
  char* e = static_cast<char*>(heap_->alloc(40));
  EXPECT_EQ(e - d, 48);
  EXPECT_EQ(heap_->size(d), 48u);
}

TEST_F(HeapTest, AlignedAllocationUpToAndBeyondAPage) {
  for (size_t align = 8; align <= (size_t{1} << 21); align *= 2) {
    for (size_t size : {1ul, 24ul, 100ul, 700ul, 5000ul, 40000ul}) {
      void* p = heap_->alloc_aligned(size, align);
      ASSERT_NE(p, nullptr) << align << " " << size;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % align, 0u) << align << " " << size;
      EXPECT_GE(heap_->size(p), size);
      std::memset(p, 1, size);
      heap_->free(p);
    }
  }
  ExpectConsistent();
  errno = 0;
  EXPECT_EQ(heap_->alloc_aligned(64, 24), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(heap_->alloc_aligned(64, 0), nullptr);
}

// With sampling off the countdown still runs out, every
// kSamplingProbeBytes on average, to look whether sampling was turned on; the
// allocation made then keeps its alignment like any other. One plain 24-byte
// object first: when classes were 8 bytes apart it left the next object of
// its class 8-byte aligned, and a 16-byte request must never get such an
// object.
TEST_F(HeapTest, AlignmentHoldsWhenTheSamplingCountdownRunsOut) {
  void* plain = heap_->alloc(24);
  ASSERT_NE(plain, nullptr);
  // Enough bytes that the countdown runs out about 16 times.
  for (uint64_t bytes = 0; bytes < 16 * heap::kSamplingProbeBytes; bytes += 24) {
    void* p = heap_->alloc_aligned(24, 16);
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(reinterpret_cast<uintptr_t>(p) % 16, 0u) << "after " << bytes << " bytes";
    heap_->free(p);
  }
  heap_->free(plain);
  ExpectConsistent();
}

TEST_F(HeapTest, AllocZeroedIsZeroEvenOnReusedMemory) {
  for (size_t size : kSizes) {
    void* dirty = heap_->alloc(size);
    std::memset(dirty, 0xff, size);
    heap_->free(dirty);
    auto* p = static_cast<unsigned char*>(heap_->alloc_zeroed(size));
    for (size_t i = 0; i < size; ++i) ASSERT_EQ(p[i], 0) << size << " at " << i;
    heap_->free(p);
  }
}

TEST_F(HeapTest, ResizeKeepsContentsAndHonoursFlags) {
  auto* p = static_cast<unsigned char*>(heap_->alloc(10));
  for (int i = 0; i < 10; ++i) p[i] = static_cast<unsigned char>(i);
  size_t size = 10;
  for (size_t next : {20ul, 100ul, 600ul, 3000ul, 40000ul, 300000ul, 50ul, 5ul}) {
    p = static_cast<unsigned char*>(heap_->resize(p, next));
    ASSERT_NE(p, nullptr);
    for (size_t i = 0; i < std::min<size_t>({size, next, 10}); ++i) ASSERT_EQ(p[i], i);
    size = next;
  }
  heap_->free(p);

  // In place within the class: same pointer.
  void* q = heap_->alloc(100);
  EXPECT_EQ(heap_->resize(q, 104), q);
  // Without kResizeMove a resize that cannot stay in place fails, q intact.
  errno = 0;
  EXPECT_EQ(heap_->resize(q, 5000, 0), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(heap_->addr(q), q);
  // kResizeClear zeroes what lies past the old size; without kResizeCopy the
  // old bytes are not carried over.
  std::memset(q, 0x7f, 100);
  auto* r = static_cast<unsigned char*>(heap_->resize(q, 8000, kResizeMove | kResizeCopy | kResizeClear));
  for (size_t i = 0; i < 100; ++i) ASSERT_EQ(r[i], 0x7f);
  for (size_t i = 104; i < 8000; ++i) ASSERT_EQ(r[i], 0) << i;
  // p == nullptr allocates, size 0 frees.
  void* s = heap_->resize(nullptr, 33);
  EXPECT_NE(s, nullptr);
  EXPECT_EQ(heap_->resize(s, 0), nullptr);
  heap_->free(r);
  ExpectConsistent();
}

TEST_F(HeapTest, LargeObjectsGrowInPlaceIntoFreeSpace) {
  heap_ = std::move(Heap::create(HeapOptions{.params = testing::params_with_large_range()}).value());
  void* a = heap_->alloc(17000);
  EXPECT_EQ(heap_->resize(a, 30000), a);  // the rest of its large block is free
  EXPECT_GE(heap_->size(a), 30000u);
  EXPECT_EQ(heap_->resize(a, 20000), a);  // shrinks in place
  heap_->free(a);
  ExpectConsistent();
}

// With the default boundaries, objects up to 64 KiB are of classes: a
// resize within the class stays, past it the object moves with its bytes.
TEST_F(HeapTest, ObjectsUpToSixtyFourKiBStayInTheirClassAndMoveWhenTheyOutgrowIt) {
  auto* a = static_cast<unsigned char*>(heap_->alloc(50000));
  EXPECT_EQ(heap_->size(a), 57344u);
  std::memset(a, 7, 50000);
  EXPECT_EQ(heap_->resize(a, 57344), a);
  auto* b = static_cast<unsigned char*>(heap_->resize(a, 65536));
  ASSERT_NE(b, nullptr);
  EXPECT_NE(b, a);
  EXPECT_EQ(heap_->size(b), 65536u);
  for (int i = 0; i < 50000; ++i) ASSERT_EQ(b[i], 7) << i;
  auto* c = static_cast<unsigned char*>(heap_->resize(b, 65537));  // past the classes: a run of pages
  ASSERT_NE(c, nullptr);
  EXPECT_GE(heap_->size(c), 65537u);
  for (int i = 0; i < 50000; ++i) ASSERT_EQ(c[i], 7) << i;
  heap_->free(c);
  ExpectConsistent();
}

TEST_F(HeapTest, AMidSizeObjectMovesToALargerClassWhenItGrowsPastItsOwn) {
  auto* a = static_cast<unsigned char*>(heap_->alloc(1000));
  EXPECT_EQ(heap_->size(a), 1024u);  // the class of 1024 bytes
  std::memset(a, 9, 1000);
  EXPECT_EQ(heap_->resize(a, 1024), a);  // still fits its class
  auto* b = static_cast<unsigned char*>(heap_->resize(a, 6000));
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(heap_->size(b), 6144u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(b[i], 9) << i;
  heap_->free(b);
  ExpectConsistent();
}

TEST_F(HeapTest, HugeObjectsGrowInPlaceWhenThePagesAfterAreFree) {
  void* a = heap_->alloc(100000);
  void* b = heap_->alloc(200000);
  heap_->free(b);
  heap_->compact();  // b's run back in the page heap, not kept for this thread
  EXPECT_EQ(heap_->resize(a, 250000), a);
  EXPECT_EQ(heap_->resize(a, 80000), a);
  heap_->free(a);
  ExpectConsistent();
}

TEST_F(HeapTest, AHugeObjectThatCannotGrowInPlaceMovesItsPagesInsteadOfCopyingThem) {
  const size_t kOld = 4 << 20, kNew = 9 << 20;
  auto* a = static_cast<unsigned char*>(heap_->alloc(kOld));
  void* fence = heap_->alloc(1 << 20);  // the pages after `a` are taken
  ASSERT_NE(a, nullptr);
  for (size_t i = 0; i < kOld; ++i) a[i] = static_cast<unsigned char>(i * 7 + i / 4096);
  size_t moved_before = heap_->stat().pages_moved;
  auto* b = static_cast<unsigned char*>(heap_->resize(a, kNew));
  ASSERT_NE(b, nullptr);
  EXPECT_NE(b, a);
  EXPECT_EQ(heap_->stat().pages_moved - moved_before, kOld / 4096);
  for (size_t i = 0; i < kOld; ++i) ASSERT_EQ(b[i], static_cast<unsigned char>(i * 7 + i / 4096)) << i;
  // The rest of the new object is usable, and the old run serves again.
  std::memset(b + kOld, 0xee, kNew - kOld);
  auto* c = static_cast<unsigned char*>(heap_->alloc_zeroed(kOld));
  ASSERT_NE(c, nullptr);
  for (size_t i = 0; i < kOld; i += 512) ASSERT_EQ(c[i], 0) << i;
  // Small huge objects are copied: one page-table move costs more than that.
  auto* d = static_cast<unsigned char*>(heap_->alloc(40000));
  void* fence2 = heap_->alloc(40000);
  std::memset(d, 0x5a, 40000);
  moved_before = heap_->stat().pages_moved;
  auto* e = static_cast<unsigned char*>(heap_->resize(d, 200000));
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(heap_->stat().pages_moved, moved_before);
  for (size_t i = 0; i < 40000; ++i) ASSERT_EQ(e[i], 0x5a) << i;
  for (void* p : {static_cast<void*>(b), static_cast<void*>(c), static_cast<void*>(e), fence, fence2}) heap_->free(p);
  ExpectConsistent();
}

TEST_F(HeapTest, LargeFreesCoalesceBackIntoOneBlock) {
  std::vector<void*> v;
  for (int i = 0; i < 60; ++i) v.push_back(heap_->alloc(600 + 97 * i));
  std::mt19937 rng(3);
  std::shuffle(v.begin(), v.end(), rng);
  for (void* p : v) heap_->free(p);
  ExpectConsistent();  // fails on two free chunks side by side
  heap_->compact();
  EXPECT_EQ(heap_->stat().busy_objects, 0u);
  EXPECT_EQ(heap_->stat().pages_in_use, 0u);
}

TEST_F(HeapTest, AddrAndSizeAnswerForLiveObjectsOnly) {
  char* small = static_cast<char*>(heap_->alloc(48));
  char* large = static_cast<char*>(heap_->alloc(3000));
  char* huge = static_cast<char*>(heap_->alloc(70000));
  EXPECT_EQ(heap_->addr(small + 47), small);
  EXPECT_EQ(heap_->addr(large + 2999), large);
  EXPECT_EQ(heap_->addr(huge + 69999), huge);
  EXPECT_EQ(heap_->size(small), 48u);
  EXPECT_EQ(heap_->size(small + 8), 0u);
  int on_stack;
  EXPECT_EQ(heap_->addr(&on_stack), nullptr);
  heap_->free(small);
  heap_->free(large);
  EXPECT_EQ(heap_->addr(small), nullptr);
  EXPECT_EQ(heap_->addr(large + 10), nullptr);
  EXPECT_EQ(heap_->size(small), 0u);
  heap_->free(huge);
  EXPECT_EQ(heap_->addr(huge), nullptr);
}

TEST_F(HeapTest, StatCountsBusyAndFreeObjects) {
  std::vector<void*> v;
  for (int i = 0; i < 1000; ++i) v.push_back(heap_->alloc(64));
  HeapStats s = heap_->stat();
  EXPECT_EQ(s.busy_objects, 1000u);
  EXPECT_EQ(s.busy_bytes, 64000u);
  EXPECT_GT(s.free_objects, 0u);
  EXPECT_GE(s.pages_in_use, 1000u * 64 / 4096);
  for (int i = 0; i < 500; ++i) heap_->free(v[i]);
  s = heap_->stat();
  EXPECT_EQ(s.busy_objects, 500u);
  for (int i = 500; i < 1000; ++i) heap_->free(v[i]);
  EXPECT_EQ(heap_->stat().busy_objects, 0u);
}

TEST_F(HeapTest, ClearFreesEverythingAndTheHeapWorksAfter) {
  for (size_t size : kSizes) heap_->alloc(size);
  heap_->clear();
  HeapStats s = heap_->stat();
  EXPECT_EQ(s.busy_objects, 0u);
  EXPECT_EQ(s.pages_in_use, 0u);
  ExpectConsistent();
  for (size_t size : kSizes) {
    void* p = heap_->alloc(size);
    ASSERT_NE(p, nullptr);
    std::memset(p, 3, size);
  }
  ExpectConsistent();
}

TEST_F(HeapTest, CompactGivesEmptyPagesBack) {
  std::vector<void*> v;
  for (int i = 0; i < 20000; ++i) v.push_back(heap_->alloc(200));
  for (void* p : v) heap_->free(p);
  heap_->compact();
  HeapStats s = heap_->stat();
  EXPECT_EQ(s.pages_in_use, 0u);
  EXPECT_EQ(s.pages_dirty, 0u);
  EXPECT_GT(s.pages_discarded_total, 0u);
  ExpectConsistent();
}

TEST_F(HeapTest, HugeSizesFailWithEnomem) {
  for (size_t size : {SIZE_MAX, SIZE_MAX - 4096, size_t{1} << 62, size_t{1} << 40}) {
    errno = 0;
    EXPECT_EQ(heap_->alloc(size), nullptr) << size;
    EXPECT_EQ(errno, ENOMEM);
    EXPECT_EQ(heap_->alloc_aligned(size, 64), nullptr);
    EXPECT_EQ(heap_->alloc_zeroed(size), nullptr);
  }
  void* p = heap_->alloc(10);
  EXPECT_EQ(heap_->resize(p, SIZE_MAX), nullptr);
  EXPECT_EQ(heap_->addr(p), p);
  ExpectConsistent();
}

TEST_F(HeapTest, BadFreesAreReportedAndDoNotCorruptTheHeap) {
  unsigned long errors = region::error_count();
  int on_stack;
  heap_->free(&on_stack);
  EXPECT_EQ(region::error_count(), ++errors);
  for (size_t size : {32ul, 300ul, 4000ul, 100000ul}) {
    char* p = static_cast<char*>(heap_->alloc(size));
    heap_->free(p + 16);  // an interior pointer
    heap_->free(p);
    heap_->free(p);       // double free
    errors += 2;
    EXPECT_EQ(region::error_count(), errors) << size;
  }
  ExpectConsistent();
  // The heap hands out distinct objects afterwards: the double free did not
  // put anything on a free list twice.
  std::set<void*> seen;
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(seen.insert(heap_->alloc(32)).second);
  void* p = heap_->alloc(64);
  heap_->free(p);
  errno = 0;
  EXPECT_EQ(heap_->resize(p, 128), nullptr);  // resize of a freed object
  EXPECT_EQ(errno, EINVAL);
  ExpectConsistent();
}

TEST_F(HeapTest, InvalidOptionsAreRejected) {
  HeapOptions o;
  o.params.medium_max = 2000;  // between two segregated classes
  auto h = Heap::create(o);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  o = HeapOptions{};
  o.reserve_bytes = 4096;
  EXPECT_FALSE(Heap::create(o).ok());
}

TEST_F(HeapTest, DiscardImmediateReturnsPagesAsSoonAsTheyEmpty) {
  HeapOptions o;
  o.params.discard_mode = heap::DiscardMode::kImmediate;
  auto h = Heap::create(o);
  ASSERT_TRUE(h.ok());
  void* p = (*h)->alloc(2 << 20);  // above what a thread keeps for reuse
  std::memset(p, 1, 2 << 20);
  (*h)->free(p);
  HeapStats s = (*h)->stat();
  EXPECT_EQ(s.pages_dirty, 0u);
  EXPECT_GE(s.pages_discarded_total, 512u);
}

TEST_F(HeapTest, HysteresisKeepsAFewEmptyPagesForReuse) {
  HeapOptions o;
  o.params.dirty_decay_ms = 1u << 30;  // no decay while the test runs, however slow
  o.params.dirty_floor_pages = 1024;
  auto created = Heap::create(o);
  ASSERT_TRUE(created.ok());
  Heap& heap = **created;
  void* p = heap.alloc(2 << 20);  // above what a thread keeps for reuse
  std::memset(p, 1, 2 << 20);
  heap.free(p);
  HeapStats s = heap.stat();
  EXPECT_EQ(s.pages_dirty, 512u);  // within the 4 MiB floor: kept
  EXPECT_EQ(heap.alloc(2 << 20), p);  // and reused without a fault storm
}

TEST_F(HeapTest, AHeapThatRefaultsWhatItDiscardedLearnsToKeepIt) {
  // Time plays no part here: nothing decays within the test.
  HeapOptions o;
  o.params.dirty_decay_ms = 1u << 30;
  o.params.refault_halving_ms = 1u << 30;
  auto created = Heap::create(o);
  ASSERT_TRUE(created.ok());
  Heap& heap = **created;
  // 8 MiB buffers: above the floor, so the first ones are discarded when
  // freed; reusing them refaults, and the policy then keeps them.
  auto round = [&] {
    void* p = heap.alloc(8 << 20);
    std::memset(p, 1, 8 << 20);
    heap.free(p);
  };
  for (int i = 0; i < 5; ++i) round();
  size_t discarded = heap.stat().pages_discarded_total;
  EXPECT_GT(discarded, 0u);
  for (int i = 0; i < 20; ++i) round();
  EXPECT_EQ(heap.stat().pages_discarded_total, discarded);
  EXPECT_EQ(heap.stat().pages_dirty, 2048u);
}

// Pages of [p, p + bytes) resident now.
size_t resident_pages(void* p, size_t bytes) {
  std::vector<unsigned char> in(bytes / 4096);
  if (mincore(p, bytes, in.data()) != 0) return SIZE_MAX;
  size_t n = 0;
  for (unsigned char c : in) n += c & 1;
  return n;
}

TEST_F(HeapTest, AZeroedHugeObjectOnReusedPagesIsNotMadeResident) {
  HeapOptions o;
  o.params.dirty_decay_ms = 1u << 30;  // the freed run stays dirty for the reuse
  o.params.dirty_floor_pages = 4096;
  auto created = Heap::create(o);
  ASSERT_TRUE(created.ok());
  Heap& heap = **created;
  constexpr size_t kBytes = 8 << 20;
  auto* dirty = static_cast<unsigned char*>(heap.alloc(kBytes));
  std::memset(dirty, 0xa5, kBytes);
  heap.free(dirty);
  EXPECT_EQ(heap.stat().pages_dirty, kBytes / 4096) << "the run was not kept dirty: the test shows nothing";
  // The same pages come back (a thread's last huge run, or the dirty run):
  // zeroed, and resident only where they are touched.
  auto* p = static_cast<unsigned char*>(heap.alloc_zeroed(kBytes));
  ASSERT_EQ(p, dirty);
  EXPECT_LE(resident_pages(p, kBytes), 16u);
  for (size_t i = 0; i < kBytes; i += 64 << 10) ASSERT_EQ(p[i], 0) << i;
  EXPECT_EQ(p[kBytes - 1], 0);
  EXPECT_LE(resident_pages(p, kBytes), kBytes / (64 << 10) + 16);
  heap.free(p);
  ExpectConsistent();
}

TEST_F(HeapTest, AHeapThatRefaultsBigBuffersLearnsToKeepMoreThanTheFixedMaximum) {
  // 20 live buffers of 16 MiB (320 MiB), one replaced at a time: each
  // replacement frees 16 MiB, more than the 6% share keeps. Refaults teach
  // the heap to keep them, up to what it holds live, past dirty_max_pages.
  HeapOptions o;
  o.params.dirty_decay_ms = 1u << 30;
  o.params.refault_halving_ms = 1u << 30;
  o.params.dirty_max_pages = 1024;  // 4 MiB: a fixed cap below one buffer
  o.params.dirty_ratio_percent = 0;  // no share of the live data kept either
  auto created = Heap::create(o);
  ASSERT_TRUE(created.ok());
  Heap& heap = **created;
  constexpr size_t kBytes = 16 << 20;
  std::vector<void*> live;
  for (int i = 0; i < 20; ++i) {
    live.push_back(heap.alloc(kBytes));
    std::memset(live.back(), 1, kBytes);
  }
  auto replace = [&](int i) {
    heap.free(live[i]);
    live[i] = heap.alloc(kBytes);
    std::memset(live[i], 2, kBytes);
  };
  for (int i = 0; i < 5; ++i) replace(i);
  size_t discarded = heap.stat().pages_discarded_total;
  for (int i = 5; i < 20; ++i) replace(i);
  EXPECT_EQ(heap.stat().pages_discarded_total, discarded) << "still refaulting every replacement";
  for (void* p : live) heap.free(p);
  ExpectConsistent();
}

TEST_F(HeapTest, AProgramThatWorksInPhasesKeepsWhatAPhaseUses) {
  // Fill 32 MiB with objects of one size, free them all, fill again with
  // another size: each phase's blocks are emptied, go back to the page
  // heap, and the next phase takes them for its class. Between two phases
  // almost nothing is in use, so a cap on what refaults teach taken from
  // the pages in use now (as it was) kept nothing, and every phase
  // refaulted the last one's pages; capped by the pages in use lately, the
  // heap learns to keep one phase's worth.
  HeapOptions o;
  o.params.dirty_decay_ms = 1u << 30;
  o.params.refault_halving_ms = 1u << 30;
  o.params.dirty_max_pages = 1024;   // 4 MiB: a fixed cap far below a phase
  o.params.dirty_ratio_percent = 0;  // no share of the live data kept either
  auto created = Heap::create(o);
  ASSERT_TRUE(created.ok());
  Heap& heap = **created;
  constexpr size_t kPhaseBytes = 32 << 20;
  const size_t sizes[] = {48, 96, 160, 256};
  std::vector<void*> objects;
  auto phase = [&](int i) {
    size_t size = sizes[i % 4];
    objects.resize(kPhaseBytes / size);
    for (void*& p : objects) {
      p = heap.alloc(size);
      ASSERT_NE(p, nullptr);
      *static_cast<char*>(p) = 1;
    }
    for (void* p : objects) heap.free(p);
  };
  for (int i = 0; i < 4; ++i) phase(i);
  size_t discarded = heap.stat().pages_discarded_total;
  EXPECT_GT(discarded, 0u) << "nothing was discarded while the heap learned: the test shows nothing";
  for (int i = 4; i < 12; ++i) phase(i);
  EXPECT_EQ(heap.stat().pages_discarded_total, discarded) << "still refaulting every phase";
  ExpectConsistent();
}

TEST_F(HeapTest, AThreadReusesTheHugeRunItFreedLast) {
  void* p = heap_->alloc(100000);
  heap_->free(p);
  EXPECT_EQ(heap_->stat().busy_objects, 0u);  // kept for reuse, but free
  EXPECT_EQ(heap_->addr(p), nullptr);
  unsigned long errors = region::error_count();
  heap_->free(p);  // a double free of a kept run is still caught
  EXPECT_EQ(region::error_count(), errors + 1);
  EXPECT_EQ(heap_->alloc(100000), p);  // same size: the same run
  void* other = heap_->alloc(200000);  // another size: another run
  EXPECT_NE(other, p);
  heap_->free(other);
  heap_->free(p);
  heap_->compact();  // kept runs go back too
  EXPECT_EQ(heap_->stat().pages_in_use, 0u);
  ExpectConsistent();
}

TEST_F(HeapTest, AThreadKeepsAsManyFreedHugeRunsAsItRecentlyAllocated) {
  // Eight runs of 1 MiB at a time: the cache grows to what the thread asks
  // for, past the single run (1 MiB) a thread kept before, so a second
  // generation of the same sizes comes from the first's pages.
  std::set<void*> first;
  std::vector<void*> v;
  for (int i = 0; i < 8; ++i) v.push_back(heap_->alloc((1 << 20) - 4096 * i));
  for (void* p : v) first.insert(p);
  uint64_t in_use = heap_->stat().pages_in_use;
  for (void* p : v) heap_->free(p);
  EXPECT_EQ(heap_->stat().pages_in_use, in_use) << "the freed runs went back to the page heap";
  for (int i = 7; i >= 0; --i) {
    void* p = heap_->alloc((1 << 20) - 4096 * i);
    EXPECT_EQ(first.count(p), 1u) << "run " << i << " was not reused";
    heap_->free(p);
  }
  heap_->compact();
  EXPECT_EQ(heap_->stat().pages_in_use, 0u);
  ExpectConsistent();
}

// Objects of 64-120 B live in blocks of two pages each: a block a size
// emptied serves any other of these sizes.
uintptr_t page_of(const void* p) { return reinterpret_cast<uintptr_t>(p) & ~uintptr_t{4095}; }

TEST_F(HeapTest, EmptyBlocksOfOneSizeServeAnotherSizeOfTheSameBlockLengthWithoutNewPages) {
  std::vector<void*> first;
  for (int i = 0; i < 10 * 128; ++i) first.push_back(heap_->alloc(64));  // ten blocks of 128 objects
  std::set<uintptr_t> emptied;
  for (void* p : first) emptied.insert(page_of(p));
  for (void* p : first) heap_->free(p);
  uint64_t in_use = heap_->stat().pages_in_use;
  // Seven blocks' worth of 80-byte objects (102 to a block): from the
  // blocks the 64-byte size emptied, not from the page heap.
  std::vector<void*> second;
  for (int i = 0; i < 7 * 102; ++i) {
    char* p = static_cast<char*>(heap_->alloc(80));
    ASSERT_NE(p, nullptr);
    std::memset(p, 0x5a, 80);
    second.push_back(p);
  }
  EXPECT_EQ(heap_->stat().pages_in_use, in_use) << "the second size took new pages";
  size_t from_emptied = 0;
  for (void* p : second) from_emptied += emptied.count(page_of(p));
  EXPECT_EQ(from_emptied, second.size());
  for (void* p : second) {
    EXPECT_EQ(heap_->size(p), 80u);
    heap_->free(p);
  }
  heap_->compact();
  EXPECT_EQ(heap_->stat().pages_in_use, 0u) << "kept empty blocks outlived the compaction";
  ExpectConsistent();
}

TEST_F(HeapTest, AFreeIntoABlockKeptEmptyIsADoubleFreeAndTheBlockServesAnotherSizeIntact) {
  std::vector<void*> first;
  for (int i = 0; i < 10 * 64; ++i) first.push_back(heap_->alloc(64));
  for (void* p : first) heap_->free(p);
  unsigned long errors = region::error_count();
  for (int i = 0; i < 10 * 64; i += 64) heap_->free(first[i]);  // once more: one per block
  EXPECT_EQ(region::error_count(), errors + 10);
  std::vector<std::pair<char*, unsigned char>> second;
  for (int i = 0; i < 10 * 64; ++i) {
    char* p = static_cast<char*>(heap_->alloc(96));
    ASSERT_NE(p, nullptr);
    std::memset(p, i & 0xff, 96);
    second.push_back({p, static_cast<unsigned char>(i & 0xff)});
  }
  std::set<char*> distinct;
  for (auto& [p, v] : second) {
    EXPECT_TRUE(distinct.insert(p).second) << "one object handed out twice";
    EXPECT_EQ(static_cast<unsigned char>(p[0]), v);
    EXPECT_EQ(static_cast<unsigned char>(p[95]), v);
  }
  for (auto& [p, v] : second) heap_->free(p);
  ExpectConsistent();
}

// A block parked empty that comes back to its own size serves from the free
// list its frees built (last freed first, from the inline path), not
// formatted back to bump allocation (first object first, through the slow
// path for every object). Its frees stay checked: an object on that list
// freed again is a double free.
TEST_F(HeapTest, AnEmptyBlockBackToItsOwnSizeServesItsFreeListAsItIs) {
  std::vector<char*> first;
  for (int i = 0; i < 10 * 64; ++i) first.push_back(static_cast<char*>(heap_->alloc(64)));  // ten blocks
  std::set<uintptr_t> pages;
  for (char* p : first) pages.insert(page_of(p));
  ASSERT_EQ(pages.size(), 10u);
  std::sort(first.begin(), first.end());
  for (char* p : first) heap_->free(p);  // in address order: each block's last object freed last
  uint64_t in_use = heap_->stat().pages_in_use;
  std::map<uintptr_t, std::vector<char*>> served;  // page -> its objects in the order they came
  std::vector<char*> second;
  for (int i = 0; i < 10 * 64; ++i) {
    char* p = static_cast<char*>(heap_->alloc(64));
    ASSERT_NE(p, nullptr);
    second.push_back(p);
    served[page_of(p)].push_back(p);
  }
  EXPECT_EQ(heap_->stat().pages_in_use, in_use) << "the second round took new pages";
  EXPECT_EQ(served.size(), 10u);
  for (auto& [page, objects] : served) {
    ASSERT_EQ(objects.size(), 64u) << "page " << page;
    EXPECT_TRUE(std::is_sorted(objects.rbegin(), objects.rend()))
        << "the block of page " << page << " was formatted: its objects came first object first";
  }
  // Half of each block back; its freed objects freed again are double frees.
  for (auto& [page, objects] : served) {
    for (size_t k = 0; k < objects.size(); k += 2) heap_->free(objects[k]);
  }
  unsigned long errors = region::error_count();
  for (auto& [page, objects] : served) heap_->free(objects[0]);
  EXPECT_EQ(region::error_count(), errors + 10);
  for (auto& [page, objects] : served) {
    for (size_t k = 1; k < objects.size(); k += 2) heap_->free(objects[k]);
  }
  heap_->compact();
  EXPECT_EQ(heap_->stat().pages_in_use, 0u);
  ExpectConsistent();
}

// A buffer grown by realloc through the big classes (blocks of 8 objects of
// 8 KiB and more) leaves an empty block in each. Once such a class stays
// idle (its current block empty each time the heap looks, before taking
// new pages), its blocks go back, where any size can use their pages. A
// big class still in use keeps its block.
TEST_F(HeapTest, TheEmptyBlocksOfIdleBigClassesGoBackToThePageHeap) {
  char* growing = static_cast<char*>(heap_->alloc(12 * 1024));
  std::memset(growing, 7, 12 * 1024);
  for (size_t size = 16 * 1024; size <= 64 * 1024; size += 4 * 1024) {
    growing = static_cast<char*>(heap_->resize(growing, size));
    ASSERT_NE(growing, nullptr);
    std::memset(growing + size - 4096, 7, 4096);
  }
  char* kept = static_cast<char*>(heap_->alloc(10 * 1024));  // a big class in use
  // The growth took a block in each class it passed (from 12 KiB: 24, 32,
  // 40, 48, 56 and 64 pages, then 60, 60, 56 and 64 for the classes of 4-6
  // objects past 32 KiB), 504 pages, plus 20 for the 10 KiB class. Each
  // block it left went back once its class had been seen idle twice, as the
  // next classes took theirs: what stays is the last classes' blocks and
  // the lookaside (at most 64 pages).
  uint64_t held = heap_->stat().pages_in_use;
  EXPECT_LT(held, 300u);
  // More classes taking blocks give back the rest.
  std::vector<void*> small;
  for (size_t size = 16; size <= 512; size += 16) small.push_back(heap_->alloc(size));
  EXPECT_LT(heap_->stat().pages_in_use, held + 64) << "held " << held;
  char* next = static_cast<char*>(heap_->alloc(10 * 1024));
  // Its block holds 8 objects of 10 KiB: the next one lies within it.
  EXPECT_LT(std::abs(next - kept), 8 * 10 * 1024) << "the busy big class lost its block";
  EXPECT_EQ(static_cast<unsigned char>(growing[0]), 7);
  heap_->free(next);
  heap_->free(kept);
  heap_->free(growing);
  for (void* p : small) heap_->free(p);
  ExpectConsistent();
}

TEST_F(HeapTest, AKeptHugeRunThatRequestsOfOtherSizesPassByGoesBackToThePageHeap) {
  // Growing buffers: each request is bigger than every run kept, so a kept
  // run serves none of them. It survives the first miss after its free (it
  // might have been the next request's), and goes back at the second. (All
  // three sizes are ones a thread keeps: at most 256 pages.)
  void* p = heap_->alloc(50 * 4096);
  heap_->free(p);
  uint64_t in_use = heap_->stat().pages_in_use;  // the kept run counts as in use
  void* a = heap_->alloc(100 * 4096);
  EXPECT_EQ(heap_->stat().pages_in_use, in_use + 100) << "the run freed just before was given back";
  void* b = heap_->alloc(150 * 4096);
  EXPECT_EQ(heap_->stat().pages_in_use, in_use + 100 + 150 - 50) << "the passed-by run is still kept";
  heap_->free(a);
  heap_->free(b);
  heap_->compact();
  EXPECT_EQ(heap_->stat().pages_in_use, 0u);
  ExpectConsistent();
}

TEST_F(HeapTest, AKeptHugeRunGoesBackWhenRequestsTooBigToKeepPassBy) {
  // Buffers of 64 KiB-4 MiB replaced at random: the requests over 1 MiB are
  // never served from what a thread keeps, but they count as passing a kept
  // run by, and it goes back at the second of them as at any miss.
  void* p = heap_->alloc(50 * 4096);
  heap_->free(p);
  uint64_t in_use = heap_->stat().pages_in_use;  // the kept run counts as in use
  void* a = heap_->alloc(300 * 4096);            // past the 256 pages a thread keeps
  EXPECT_EQ(heap_->stat().pages_in_use, in_use + 300) << "the run freed just before was given back";
  void* b = heap_->alloc(400 * 4096);
  EXPECT_EQ(heap_->stat().pages_in_use, in_use + 300 + 400 - 50) << "the passed-by run is still kept";
  heap_->free(a);
  heap_->free(b);
  heap_->compact();
  EXPECT_EQ(heap_->stat().pages_in_use, 0u);
  ExpectConsistent();
}

TEST_F(HeapTest, AHugeRunFreedJustBeforeAMissIsStillThereForTheNextRequest) {
  // free(old); alloc(other size); alloc(old size): the pattern of two
  // buffers replaced in turn. The miss between must not give the run back.
  void* p = heap_->alloc(100 * 4096);
  heap_->free(p);
  void* other = heap_->alloc(200 * 4096);
  EXPECT_EQ(heap_->alloc(100 * 4096), p);
  heap_->free(p);
  heap_->free(other);
  heap_->compact();
  EXPECT_EQ(heap_->stat().pages_in_use, 0u);
  ExpectConsistent();
}

TEST_F(HeapTest, AKeptHugeRunServesASomewhatSmallerRequestButNotAMuchSmallerOne) {
  char* p = static_cast<char*>(heap_->alloc(100 * 4096));
  std::memset(p, 7, 100 * 4096);
  heap_->free(p);
  // 90 pages: 100 is within a quarter more, so the run is reused as it is.
  char* q = static_cast<char*>(heap_->alloc(90 * 4096));
  EXPECT_EQ(q, p);
  EXPECT_EQ(heap_->size(q), 100u * 4096);
  std::memset(q, 1, 90 * 4096);
  // It shrinks in place when asked.
  EXPECT_EQ(heap_->resize(q, 60 * 4096), q);
  EXPECT_EQ(heap_->size(q), 60u * 4096);
  heap_->free(q);
  // 30 pages from a 60-page run would waste half: a run of its own.
  char* r = static_cast<char*>(heap_->alloc(30 * 4096));
  EXPECT_NE(r, q);
  EXPECT_EQ(heap_->size(r), 30u * 4096);
  heap_->free(r);
  heap_->compact();
  EXPECT_EQ(heap_->stat().pages_in_use, 0u);
  ExpectConsistent();
}

TEST_F(HeapTest, ACachedHugeRunIsNeitherLiveNorFreeableTwice) {
  std::vector<void*> v;
  for (int i = 0; i < 4; ++i) v.push_back(heap_->alloc(50000 + 10000 * i));
  for (void* p : v) heap_->free(p);
  EXPECT_EQ(heap_->stat().busy_objects, 0u);
  unsigned long errors = region::error_count();
  for (void* p : v) {
    EXPECT_EQ(heap_->addr(p), nullptr);
    heap_->free(p);  // each a double free, caught though the run is kept
  }
  EXPECT_EQ(region::error_count(), errors + 4);
  ExpectConsistent();
}

TEST_F(HeapTest, AHugeRequestFindsFreeSpaceSplitBetweenDirtyAndDiscardedRuns) {
  HeapOptions o;
  o.reserve_bytes = size_t{32} << 20;
  o.params.dirty_decay_ms = 1u << 30;  // freed runs stay dirty until compact()
  o.params.dirty_floor_pages = 1u << 20;
  auto created = Heap::create(o);
  ASSERT_TRUE(created.ok()) << created.status();
  Heap& heap = **created;
  constexpr size_t kRun = (size_t{1} << 20) + 4096;  // past what a thread keeps for itself
  std::vector<void*> v;
  while (void* p = heap.alloc(kRun)) v.push_back(p);
  ASSERT_GE(v.size(), 8u);
  // Every other run freed and discarded, then the rest freed and kept dirty:
  // runs of one state alternate with runs of the other, none longer than one.
  for (size_t i = 0; i < v.size(); i += 2) heap.free(v[i]);
  heap.compact();
  for (size_t i = 1; i < v.size(); i += 2) heap.free(v[i]);
  EXPECT_GT(heap.stat().pages_dirty, 0u);
  void* big = heap.alloc(3 * kRun);
  EXPECT_NE(big, nullptr) << "the free space is all there, split by state";
  heap.free(big);
  ExpectConsistent();
}

TEST_F(HeapTest, PressureModeKeepsEmptyPagesWhileMemoryIsPlentiful) {
  struct sysinfo si;
  ASSERT_EQ(sysinfo(&si), 0);
  if ((uint64_t{si.freeram} + si.bufferram) * 4 < uint64_t{si.totalram}) {
    GTEST_SKIP() << "this machine is short of memory now";
  }
  HeapOptions o;
  o.params.discard_mode = heap::DiscardMode::kPressure;
  auto created = Heap::create(o);
  ASSERT_TRUE(created.ok());
  Heap& heap = **created;
  std::vector<void*> v;
  for (int i = 0; i < 32; ++i) {
    v.push_back(heap.alloc(2 << 20));
    std::memset(v.back(), 1, 2 << 20);
  }
  for (void* p : v) heap.free(p);
  HeapStats s = heap.stat();
  EXPECT_EQ(s.pages_discarded_total, 0u);  // far above every hysteresis limit, yet kept
  EXPECT_GE(s.pages_dirty, 32u * 512);
  heap.compact();  // an explicit compaction still gives everything back
  EXPECT_EQ(heap.stat().pages_dirty, 0u);
}

TEST_F(HeapTest, DiscardedRunsGiveTheirDescriptorPagesBackAndStayConsistent) {
  std::vector<void*> v;
  for (int i = 0; i < 100000; ++i) v.push_back(heap_->alloc(32));
  for (void* p : v) heap_->free(p);
  heap_->compact();
  ExpectConsistent();  // inner descriptors of discarded runs read as zero
  for (int i = 0; i < 100000; ++i) v[i] = heap_->alloc(32);
  ExpectConsistent();
  for (void* p : v) heap_->free(p);
}

}  // namespace
}  // namespace memd
