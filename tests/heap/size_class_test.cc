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
  EXPECT_EQ(classes.kind_of(504), SizeKind::kLarge);
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
