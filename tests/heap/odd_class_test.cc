// Blocks of the classes of odd multiples of 8 bytes (24, 40, ..., 504).
// Requests no longer take them (every object is 16-byte aligned, size_class.h),
// but regions made before hold such blocks, and the table keeps the classes
// for them. Made here with alloc_segregated(cls), as the old mapping did:
// their objects are still sized, freed locally and by another heap, caught
// when freed twice or in the middle, kept across a crash's recovery, and
// their emptied blocks serve the classes handed out now.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "heap/size_class.h"
#include "heap/thread_heap.h"
#include "tests/heap/thread_heap_fixture.h"

namespace memd::heap {
namespace {

using OddClassTest = ThreadHeapFixture;

// That no request maps to these classes is SizeClasses' own test
// (size_class_test.cc).
constexpr uint32_t kClass24 = 3;
constexpr uint32_t kClass40 = 5;
static_assert(SizeClasses::size_of_class(kClass24) == 24 && SizeClasses::size_of_class(kClass40) == 40);

std::vector<char*> alloc_old(ThreadHeap* h, uint32_t cls, int n, char fill) {
  std::vector<char*> got;
  for (int i = 0; i < n; ++i) {
    auto* p = static_cast<char*>(h->alloc_segregated(cls));
    EXPECT_NE(p, nullptr);
    if (p == nullptr) break;
    std::memset(p, fill, SizeClasses::size_of_class(cls));
    got.push_back(p);
  }
  return got;
}

TEST_F(OddClassTest, ObjectsOfABlockMadeBeforeAreSizedAndFreedLocallyAndRemotely) {
  std::vector<char*> objs = alloc_old(heap_, kClass24, 100, 0x24);
  ASSERT_EQ(objs.size(), 100u);
  EXPECT_EQ(objs[1] - objs[0], 24);  // the old stride
  for (char* p : objs) EXPECT_EQ(heap_->usable_size(p), 24u);
  ThreadHeap* other = pool_.attach_thread();
  ASSERT_NE(other, nullptr);
  for (size_t i = 0; i < objs.size(); i += 2) EXPECT_EQ(heap_->free(objs[i]), FreeStatus::kOk);
  for (size_t i = 1; i < objs.size(); i += 2) EXPECT_EQ(other->free(objs[i]), FreeStatus::kOk) << i;
  EXPECT_EQ(heap_->free(objs[0]), FreeStatus::kDoubleFree);
  EXPECT_EQ(other->free(objs[1]), FreeStatus::kDoubleFree);
  EXPECT_EQ(heap_->free(objs[2] + 8), FreeStatus::kInvalid);  // inside an object of the 24-byte stride
  expect_consistent();
  pool_.detach_thread(other);
}

TEST_F(OddClassTest, RecoveryKeepsTheLiveObjectsOfOddClassBlocks) {
  std::vector<char*> a = alloc_old(heap_, kClass24, 300, 'a');
  std::vector<char*> b = alloc_old(heap_, kClass40, 300, 'b');
  std::vector<char*> live;
  for (size_t i = 0; i < a.size(); ++i) {
    if (i % 3 == 0) {
      heap_->free(a[i]);
      heap_->free(b[i]);
    } else {
      live.push_back(a[i]);
      live.push_back(b[i]);
    }
  }
  // The crash: the thread heap is forgotten; recovery runs as the next
  // owner's open would.
  RecoveryReport rep = recover();
  EXPECT_EQ(rep.leaked_objects, 0u);
  expect_consistent();
  EXPECT_EQ(region_stat(r(), pages_.classes()).busy_objects, live.size());
  for (char* p : live) {
    EXPECT_EQ(heap_->validate(p), FreeStatus::kOk);
    size_t n = heap_->usable_size(p);
    char fill = n == 24 ? 'a' : 'b';
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(p[i], fill) << static_cast<void*>(p) << " byte " << i;
  }
}

TEST_F(OddClassTest, AnEmptiedOddClassBlockServesAClassHandedOutNow) {
  // 24 and 32 bytes are both small: blocks of one length, which an emptied
  // block of one class may serve for the other without new pages.
  ASSERT_EQ(pages_.classes().info(kClass24).block_pages, pages_.classes().info(SizeClasses::class_of(32)).block_pages);
  const int per_block_24 = static_cast<int>(pages_.classes().info(kClass24).end / 24);
  const int per_block_32 = static_cast<int>(pages_.classes().info(SizeClasses::class_of(32)).end / 32);
  std::vector<char*> old = alloc_old(heap_, kClass24, 4 * per_block_24, 'o');  // four blocks
  std::set<uint32_t> blocks;
  for (char* p : old) blocks.insert(block_of(p).value);
  for (char* p : old) ASSERT_EQ(heap_->free(p), FreeStatus::kOk);
  std::set<uint32_t> reused;
  std::vector<char*> now;
  for (int i = 0; i < 3 * per_block_32; ++i) {
    auto* p = static_cast<char*>(heap_->alloc(32));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 16, 0u);
    std::memset(p, 'n', 32);
    if (blocks.count(block_of(p).value)) reused.insert(block_of(p).value);
    now.push_back(p);
  }
  EXPECT_FALSE(reused.empty()) << "no emptied 24-byte block served the 32-byte class";
  for (char* p : now) {
    EXPECT_EQ(heap_->usable_size(p), 32u);
    EXPECT_EQ(heap_->free(p), FreeStatus::kOk);
  }
  expect_consistent();
}

// A region made when requests took the classes 8 bytes apart, with a
// medium_max that is itself an odd multiple of 8: its table ends at a class
// no request takes now. It opens; requests up to the class below are served
// from classes, the 8 bytes between from the large path, every object 16-byte
// aligned; blocks of its last class (made with alloc_segregated, as the old
// mapping did) are still freed and recovered.
struct OddTableEnd {
  uint32_t small_max, medium_max, large_max;
};

class OddTableEndTest : public ThreadHeapFixture, public ::testing::WithParamInterface<OddTableEnd> {
 protected:
  OddTableEndTest() {
    params_.small_max = GetParam().small_max;
    params_.medium_max = GetParam().medium_max;
    params_.large_max = GetParam().large_max;
  }
};

TEST_P(OddTableEndTest, TheRegionOpensAndServesEverySizeAligned) {
  ASSERT_TRUE(params_valid(params_));
  char why[256] = "";
  EXPECT_EQ(region_validate(*r().header, source_.reserved_bytes(), why, sizeof why), FormatError::kOk) << why;
  const uint32_t m = params_.medium_max;
  EXPECT_EQ(pages_.classes().last_class(), m / kGranule);
  EXPECT_EQ(pages_.classes().medium_max(), m - kGranule);
  std::vector<std::pair<char*, size_t>> live;
  for (size_t size = 1; size <= 2 * m + 64; ++size) {
    auto* p = static_cast<char*>(heap_->alloc(size));
    ASSERT_NE(p, nullptr) << size;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 16, 0u) << size;
    ASSERT_GE(heap_->usable_size(p), size);
    PageKind kind = heap_->locate(p).kind;
    if (size <= m - kGranule) {
      EXPECT_EQ(kind, PageKind::kSegregated) << size;
      EXPECT_EQ(heap_->usable_size(p) % kObjectAlign, 0u) << size;
    } else if (size <= m) {
      EXPECT_EQ(kind, PageKind::kLarge) << size;  // the 8 bytes below the old last class
    } else {
      EXPECT_NE(kind, PageKind::kSegregated) << size;
    }
    std::memset(p, static_cast<int>(size), size);
    live.emplace_back(p, size);
  }
  for (auto [p, size] : live) {
    ASSERT_EQ(p[size - 1], static_cast<char>(size));
    EXPECT_EQ(heap_->free(p), FreeStatus::kOk) << size;
  }
  expect_consistent();
}

TEST_P(OddTableEndTest, ObjectsOfItsLastClassAreFreedAndRecovered) {
  const uint32_t last = pages_.classes().last_class();
  ASSERT_EQ(SizeClasses::size_of_class(last), params_.medium_max);
  std::vector<char*> objs = alloc_old(heap_, last, 64, 'l');
  ASSERT_EQ(objs.size(), 64u);
  for (char* p : objs) EXPECT_EQ(heap_->usable_size(p), params_.medium_max);
  for (size_t i = 0; i < objs.size(); i += 2) EXPECT_EQ(heap_->free(objs[i]), FreeStatus::kOk);
  EXPECT_EQ(heap_->free(objs[0]), FreeStatus::kDoubleFree);
  RecoveryReport rep = recover();
  EXPECT_EQ(rep.leaked_objects, 0u);
  expect_consistent();
  for (size_t i = 1; i < objs.size(); i += 2) {
    EXPECT_EQ(heap_->validate(objs[i]), FreeStatus::kOk);
    EXPECT_EQ(objs[i][params_.medium_max - 1], 'l');
  }
}

INSTANTIATE_TEST_SUITE_P(Tables, OddTableEndTest,
                         ::testing::Values(OddTableEnd{256, 504, 504},    // no large sizes
                                           OddTableEnd{256, 504, 8192},   // large sizes above it
                                           OddTableEnd{16, 24, 24}),      // the smallest there can be
                         [](const auto& info) {
                           return "Medium" + std::to_string(info.param.medium_max) + "Large" +
                                  std::to_string(info.param.large_max);
                         });

}  // namespace
}  // namespace memd::heap
