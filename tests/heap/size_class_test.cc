#include "heap/size_class.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <utility>

namespace memd::heap {
namespace {

// Requests up to 512 bytes take the classes of multiples of 16, so every
// object is 16-byte aligned (blocks start on pages) and none wastes more than
// 15 bytes; the 8-byte classes between stay in the table for old regions.
TEST(SizeClasses, RequestsTakeClassesSixteenBytesApartFromSixteen) {
  EXPECT_EQ(SizeClasses::class_of(0), 2u);
  EXPECT_EQ(SizeClasses::class_of(1), 2u);
  EXPECT_EQ(SizeClasses::class_of(16), 2u);
  EXPECT_EQ(SizeClasses::class_of(17), 4u);
  EXPECT_EQ(SizeClasses::class_of(24), 4u);
  EXPECT_EQ(SizeClasses::class_of(32), 4u);
  EXPECT_EQ(SizeClasses::class_of(33), 6u);
  EXPECT_EQ(SizeClasses::class_of(496), 62u);
  EXPECT_EQ(SizeClasses::class_of(497), 64u);
  SizeClasses classes{HeapParams{}};
  for (size_t size = 0; size <= 512; ++size) {
    const ClassInfo& c = classes.info(SizeClasses::class_of(size));
    EXPECT_GE(c.size, size);
    EXPECT_LT(c.size, std::max<size_t>(size, 16) + 16);
    EXPECT_EQ(c.size % 16, 0u) << size;
  }
  // The odd classes keep their 8-byte spaced sizes, for blocks made before.
  EXPECT_EQ(classes.info(3).size, 24u);
  EXPECT_EQ(classes.info(63).size, 504u);
}

TEST(SizeClasses, SmallAndMediumBlocksFollowTheBoundaries) {
  HeapParams p;
  SizeClasses classes{p};
  EXPECT_EQ(classes.info(SizeClasses::class_of(112)).block_pages, 2u);
  EXPECT_EQ(classes.info(3).block_pages, 2u);    // 24 bytes, a class of blocks made before
  EXPECT_EQ(classes.info(15).block_pages, 2u);   // 120 = small_max
  EXPECT_EQ(classes.info(SizeClasses::class_of(113)).block_pages, 4u);  // 128
  EXPECT_EQ(classes.info(SizeClasses::class_of(128)).block_pages, 4u);
  EXPECT_EQ(classes.kind_of(496), SizeKind::kSegregated);
  EXPECT_EQ(classes.kind_of(16385), SizeKind::kSegregated);
  EXPECT_EQ(classes.kind_of(65536), SizeKind::kSegregated);  // by default, no size is large
  EXPECT_EQ(classes.kind_of(65537), SizeKind::kHuge);
  // With a large range (the boundaries before classes reached 64 KiB).
  p.medium_max = 16384;
  p.large_max = 32768;
  ASSERT_TRUE(params_valid(p));
  SizeClasses with_large{p};
  EXPECT_EQ(with_large.kind_of(16384), SizeKind::kSegregated);
  EXPECT_EQ(with_large.kind_of(16385), SizeKind::kLarge);
  EXPECT_EQ(with_large.kind_of(32768), SizeKind::kLarge);
  EXPECT_EQ(with_large.kind_of(32769), SizeKind::kHuge);
}

// Free tells an object's start by object_index(off) * size == off: true at
// every object start and nowhere else, in every class's block.
TEST(SizeClasses, ObjectIndexFindsEveryObjectStartAndNothingElse) {
  SizeClasses classes{HeapParams{}};
  for (uint32_t cls = classes.first_class(); cls <= classes.last_class(); ++cls) {
    const ClassInfo& c = classes.info(cls);
    for (uint32_t off = 0; off < c.end; ++off) {
      ASSERT_EQ(SizeClasses::object_index(c, off) * c.size == off, off % c.size == 0)
          << "class " << cls << " offset " << off;
    }
  }
}

// Where a block's objects times its class size stay below 2^32 / size (every
// class up to 16 KiB), the index is exact at every offset too.
TEST(SizeClasses, ObjectIndexIsExactForEveryOffsetOfTheClassesUpToSixteenKiB) {
  HeapParams p;
  p.medium_max = 16384;
  p.large_max = 32768;
  SizeClasses classes{p};
  for (uint32_t cls = classes.first_class(); cls <= classes.last_class(); ++cls) {
    const ClassInfo& c = classes.info(cls);
    for (uint32_t off = 0; off < c.end; ++off) {
      ASSERT_EQ(SizeClasses::object_index(c, off), off / c.size) << "class " << cls << " offset " << off;
    }
  }
}

TEST(SizeClasses, AboveFiveHundredTwelveFourClassesPerDoubling) {
  EXPECT_EQ(SizeClasses::class_of(512), 64u);
  EXPECT_EQ(SizeClasses::size_of_class(SizeClasses::class_of(513)), 640u);
  EXPECT_EQ(SizeClasses::size_of_class(SizeClasses::class_of(1000)), 1024u);
  EXPECT_EQ(SizeClasses::size_of_class(SizeClasses::class_of(1025)), 1280u);
  EXPECT_EQ(SizeClasses::size_of_class(SizeClasses::class_of(8192)), 8192u);
  EXPECT_EQ(SizeClasses::size_of_class(SizeClasses::class_of(8193)), 10240u);
  EXPECT_EQ(SizeClasses::class_of(kMaxMediumMax), kMaxSegregatedClasses - 1);
  // Every size maps to the smallest class handed out that holds it (up to
  // 512, every other one), and classes grow.
  for (size_t size = kMinObject + 1; size <= kMaxMediumMax; ++size) {
    uint32_t cls = SizeClasses::class_of(size);
    uint32_t below = cls < kLinearClasses ? cls - 2 : cls - 1;
    ASSERT_GE(SizeClasses::size_of_class(cls), size) << size;
    ASSERT_LT(SizeClasses::size_of_class(below), size) << size;
    // No mid-size request wastes more than a quarter of its object.
    if (size > kLinearMax) {
      ASSERT_LE(SizeClasses::size_of_class(cls) - size, SizeClasses::size_of_class(cls) / 4) << size;
    }
  }
}

TEST(SizeClasses, MidSizeBlocksHoldEightObjectsOrAsManyAsFitAndWasteLittle) {
  HeapParams p;
  ASSERT_TRUE(params_valid(p));
  SizeClasses classes{p};
  for (uint32_t cls = SizeClasses::class_of(kLinearMax + 1); cls <= classes.last_class(); ++cls) {
    const ClassInfo& c = classes.info(cls);
    uint32_t bytes = c.block_pages * static_cast<uint32_t>(kPageSize);
    uint32_t fit = kMaxMidBlockPages * static_cast<uint32_t>(kPageSize) / c.size;
    EXPECT_LE(c.block_pages, kMaxMidBlockPages) << c.size;
    EXPECT_GE(c.end / c.size, std::min(p.mid_block_objects, fit)) << c.size;
    EXPECT_GE(c.end / c.size, kMinObjectsPerMidBlock) << c.size;
    EXPECT_LE((bytes - c.end) * 16, bytes) << c.size;
  }
}

// A region made before HeapParams::mid_block_objects reads 0 there: its
// blocks were cut for 4 objects, at the lengths they had then, which
// recovery checks every block against.
TEST(SizeClasses, ARegionOfTheFourObjectRuleKeepsItsBlockLengths) {
  HeapParams p;
  p.medium_max = 16384;
  p.large_max = 32768;
  p.mid_block_objects = 0;
  ASSERT_TRUE(params_valid(p));
  SizeClasses classes{p};
  // The lengths the rule gave (at most 16 pages then), for a sample of classes.
  const std::pair<uint32_t, uint32_t> lengths[] = {{640, 4},   {2048, 4},  {2560, 4},   {3072, 4},  {3584, 7},
                                                   {4096, 4},  {5120, 5},  {8192, 8},   {12288, 12}, {16384, 16}};
  for (auto [size, pages] : lengths) {
    EXPECT_EQ(classes.info(SizeClasses::class_of(size)).block_pages, pages) << size;
  }
}

TEST(SizeClasses, ObjectIndexIsExactAtEveryObjectOfTheBiggestClasses) {
  SizeClasses classes{HeapParams{}};
  for (uint32_t cls = classes.first_class(); cls <= classes.last_class(); ++cls) {
    const ClassInfo& c = classes.info(cls);
    for (uint32_t k = 0; k * c.size < c.end; ++k) {
      ASSERT_EQ(SizeClasses::object_index(c, k * c.size), k) << "class " << c.size;
      // The byte before a start may round up to it (48 and 56 KiB blocks are
      // long enough for that), never to another start.
      if (k > 0) {
        uint32_t before = SizeClasses::object_index(c, k * c.size - 1);
        ASSERT_TRUE(before == k - 1 || before == k) << "class " << c.size;
      }
    }
  }
}

TEST(SizeClasses, AMediumMaxThatIsNoClassSizeIsRejected) {
  HeapParams p;
  p.large_max = 32768;
  p.medium_max = 1000;
  EXPECT_FALSE(params_valid(p));
  p.medium_max = 1024;
  EXPECT_TRUE(params_valid(p));
  p.large_max = 65536;  // a medium_max below 32 KiB needs large objects up to at most that
  EXPECT_FALSE(params_valid(p));
  p.medium_max = 40960;  // a class, with large objects below it
  p.large_max = 32768;
  EXPECT_FALSE(params_valid(p));
  p.large_max = 40960;  // ... or none
  EXPECT_TRUE(params_valid(p));
  p.medium_max = 81920;  // past the largest class (4 objects no longer fit the largest mid block)
  p.large_max = 81920;
  EXPECT_FALSE(params_valid(p));
  p.medium_max = 16384;  // large objects stop at 32 KiB
  p.large_max = 49152;
  EXPECT_FALSE(params_valid(p));
  p = HeapParams{};
  p.small_max = 640;  // small classes are the 8-byte spaced ones
  p.medium_max = 1024;
  p.large_max = 32768;
  EXPECT_FALSE(params_valid(p));
  p.small_max = 120;
  EXPECT_TRUE(params_valid(p));
}

TEST(SizeClasses, BoundariesAreTunable) {
  HeapParams p;
  p.small_max = 64;
  p.medium_max = 256;
  p.large_max = 32768;
  SizeClasses classes{p};
  EXPECT_EQ(classes.info(SizeClasses::class_of(64)).block_pages, 2u);
  EXPECT_EQ(classes.info(SizeClasses::class_of(72)).block_pages, 4u);
  EXPECT_EQ(classes.kind_of(264), SizeKind::kLarge);
}

}  // namespace
}  // namespace memd::heap
