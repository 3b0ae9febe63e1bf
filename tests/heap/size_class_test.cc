#include "heap/size_class.h"

#include <gtest/gtest.h>

namespace memd::heap {
namespace {

TEST(SizeClasses, ClassesAreEightBytesApartFromSixteen) {
  EXPECT_EQ(SizeClasses::class_of(0), 2u);
  EXPECT_EQ(SizeClasses::class_of(1), 2u);
  EXPECT_EQ(SizeClasses::class_of(16), 2u);
  EXPECT_EQ(SizeClasses::class_of(17), 3u);
  EXPECT_EQ(SizeClasses::class_of(24), 3u);
  EXPECT_EQ(SizeClasses::class_of(496), 62u);
  SizeClasses classes{HeapParams{}};
  for (size_t size = 0; size <= 496; ++size) {
    const ClassInfo& c = classes.info(SizeClasses::class_of(size));
    EXPECT_GE(c.size, size);
    EXPECT_LT(c.size, std::max<size_t>(size, 16) + 8);
  }
}

TEST(SizeClasses, SmallAndMediumBlocksFollowTheBoundaries) {
  HeapParams p;
  SizeClasses classes{p};
  EXPECT_EQ(classes.info(SizeClasses::class_of(120)).block_pages, 1u);
  EXPECT_EQ(classes.info(SizeClasses::class_of(128)).block_pages, 4u);
  EXPECT_EQ(classes.kind_of(496), SizeKind::kSegregated);
  EXPECT_EQ(classes.kind_of(16384), SizeKind::kSegregated);
  EXPECT_EQ(classes.kind_of(16385), SizeKind::kLarge);
  EXPECT_EQ(classes.kind_of(32768), SizeKind::kLarge);
  EXPECT_EQ(classes.kind_of(32769), SizeKind::kHuge);
}

TEST(SizeClasses, ObjectIndexIsExactForEveryOffsetOfEveryClass) {
  SizeClasses classes{HeapParams{}};
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
  // Every size maps to the smallest class that holds it, and classes grow.
  for (size_t size = kMinObject + 1; size <= kMaxMediumMax; ++size) {
    uint32_t cls = SizeClasses::class_of(size);
    ASSERT_GE(SizeClasses::size_of_class(cls), size) << size;
    ASSERT_LT(SizeClasses::size_of_class(cls - 1), size) << size;
    // No mid-size request wastes more than a quarter of its object.
    if (size > kLinearMax) {
      ASSERT_LE(SizeClasses::size_of_class(cls) - size, SizeClasses::size_of_class(cls) / 4) << size;
    }
  }
}

TEST(SizeClasses, MidSizeBlocksHoldFourObjectsAndWasteLittle) {
  HeapParams p;
  p.medium_max = 16384;
  ASSERT_TRUE(params_valid(p));
  SizeClasses classes{p};
  EXPECT_EQ(classes.kind_of(16384), SizeKind::kSegregated);
  EXPECT_EQ(classes.kind_of(16385), SizeKind::kLarge);
  for (uint32_t cls = SizeClasses::class_of(kLinearMax + 1); cls <= classes.last_class(); ++cls) {
    const ClassInfo& c = classes.info(cls);
    uint32_t bytes = c.block_pages * static_cast<uint32_t>(kPageSize);
    EXPECT_LE(c.block_pages, kMaxMidBlockPages) << c.size;
    EXPECT_GE(c.end / c.size, kMinObjectsPerMidBlock) << c.size;
    EXPECT_LE((bytes - c.end) * 16, bytes) << c.size;
  }
}

TEST(SizeClasses, ObjectIndexIsExactAtEveryObjectOfTheBiggestClasses) {
  HeapParams p;
  p.medium_max = 16384;
  SizeClasses classes{p};
  for (uint32_t cls = classes.first_class(); cls <= classes.last_class(); ++cls) {
    const ClassInfo& c = classes.info(cls);
    for (uint32_t k = 0; k * c.size < c.end; ++k) {
      ASSERT_EQ(SizeClasses::object_index(c, k * c.size), k) << "class " << c.size;
      if (k > 0) {
        ASSERT_EQ(SizeClasses::object_index(c, k * c.size - 1), k - 1) << "class " << c.size;
      }
    }
  }
}

TEST(SizeClasses, AMediumMaxThatIsNoClassSizeIsRejected) {
  HeapParams p;
  p.medium_max = 1000;
  EXPECT_FALSE(params_valid(p));
  p.medium_max = 1024;
  EXPECT_TRUE(params_valid(p));
  p.medium_max = 20480;  // a class, but 4 objects do not fit the largest mid block
  EXPECT_FALSE(params_valid(p));
  p.medium_max = 40960;  // past the largest class
  p.large_max = 32768;
  EXPECT_FALSE(params_valid(p));
  p = HeapParams{};
  p.small_max = 640;  // small classes are the 8-byte spaced ones
  p.medium_max = 1024;
  EXPECT_FALSE(params_valid(p));
}

TEST(SizeClasses, BoundariesAreTunable) {
  HeapParams p;
  p.small_max = 64;
  p.medium_max = 256;
  SizeClasses classes{p};
  EXPECT_EQ(classes.info(SizeClasses::class_of(64)).block_pages, 1u);
  EXPECT_EQ(classes.info(SizeClasses::class_of(72)).block_pages, 4u);
  EXPECT_EQ(classes.kind_of(264), SizeKind::kLarge);
}

}  // namespace
}  // namespace memd::heap
