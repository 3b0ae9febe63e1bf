// A full block's way back to the available list (ThreadHeap::unfull_below):
// it waits on the full list until an eighth of its objects (at least one) are
// free again, whether freed by its owner or by another thread, and then
// serves all of them. Returned at its first free, as before, the block was
// used up again by the next allocation, and under random frees nearly every
// free and every allocation took a slow path.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "tests/heap/thread_heap_fixture.h"

namespace memd::heap {
namespace {

constexpr size_t kSize = 64;  // a two-page block holds 128: it comes back at 16 free

class FullBlockTest : public ThreadHeapFixture {
 protected:
  uint32_t capacity() const {
    const uint32_t cls = SizeClasses::class_of(kSize);
    return pages_.classes().info(cls).end / SizeClasses::size_of_class(cls);
  }
  // Objects freed into a full block before it is available again.
  uint32_t comeback() const { return std::max<uint32_t>(1, capacity() / ThreadHeap::kUnfullFraction); }

  // Every object of one block, allocated until the heap moved on to the
  // next block, whose first object lands in *next.
  std::vector<char*> fill_one_block(char** next) {
    std::vector<char*> objs{static_cast<char*>(heap_->alloc(kSize))};
    for (;;) {
      auto* p = static_cast<char*>(heap_->alloc(kSize));
      EXPECT_NE(p, nullptr);
      if (p == nullptr || block_of(p) != block_of(objs[0])) {
        *next = p;
        return objs;
      }
      objs.push_back(p);
    }
  }
  // Allocates until an object comes from a block other than `block`;
  // returns it, and how many came from `block` before it.
  char* alloc_past(PageIndex block, uint32_t* from_block) {
    *from_block = 0;
    for (;;) {
      auto* p = static_cast<char*>(heap_->alloc(kSize));
      EXPECT_NE(p, nullptr);
      if (p == nullptr || block_of(p) != block) return p;
      ++*from_block;
    }
  }
};

TEST_F(FullBlockTest, AFullBlockWaitsForAnEighthOfItsObjectsThenServesThemAll) {
  ASSERT_GE(capacity(), 16u) << "the test needs a block where the mark is more than one free";
  char* in_b = nullptr;
  std::vector<char*> a = fill_one_block(&in_b);
  ASSERT_EQ(a.size(), capacity());
  const PageIndex block_a = block_of(a[0]);
  const PageIndex block_b = block_of(in_b);

  // One short of the mark: A stays full. Once B is used up the heap takes
  // a block it has not used yet, not A.
  for (uint32_t i = 0; i + 1 < comeback(); ++i) ASSERT_EQ(heap_->free(a[i]), FreeStatus::kOk);
  uint32_t from_b = 0;
  char* in_c = alloc_past(block_b, &from_b);
  const PageIndex block_c = block_of(in_c);
  EXPECT_NE(block_c, block_a) << "a full block came back with fewer than an eighth of its objects free";
  EXPECT_EQ(from_b + 1, capacity()) << "B served other than its own objects";

  // The mark: A is available again, behind C. When C is used up, A serves
  // exactly the objects freed into it, the earliest included.
  ASSERT_EQ(heap_->free(a[comeback() - 1]), FreeStatus::kOk);
  uint32_t from_c = 0;
  char* after_c = alloc_past(block_c, &from_c);
  EXPECT_EQ(block_of(after_c), block_a) << "the block was not available again at the mark";
  uint32_t from_a = 0;
  char* after_a = alloc_past(block_a, &from_a);
  EXPECT_EQ(from_a + 1, comeback()) << "A served other than the objects freed into it";
  EXPECT_NE(block_of(after_a), block_a);
  expect_consistent();
}

TEST_F(FullBlockTest, AFullBlockWhoseObjectsAreAllFreedEmptiesAndIsReused) {
  char* in_b = nullptr;
  std::vector<char*> a = fill_one_block(&in_b);
  const PageIndex block_a = block_of(a[0]);
  for (char* p : a) ASSERT_EQ(heap_->free(p), FreeStatus::kOk);
  EXPECT_EQ(r().block(block_a).used, 0u);
  expect_consistent();
  // Every freed object (or the whole block, once released) serves again,
  // and a double free of one of them is still caught.
  EXPECT_EQ(heap_->free(a[0]), FreeStatus::kDoubleFree);
  std::vector<char*> again;
  for (size_t i = 0; i < 3 * a.size(); ++i) again.push_back(static_cast<char*>(heap_->alloc(kSize)));
  for (char* p : again) ASSERT_EQ(heap_->free(p), FreeStatus::kOk);
  ASSERT_EQ(heap_->free(in_b), FreeStatus::kOk);
  heap_->release_empty();
  expect_consistent();
}

TEST_F(FullBlockTest, RemoteFreesBringAFullBlockBackAtTheSameMark) {
  ThreadHeap* other = pool_.attach_thread();
  ASSERT_NE(other, nullptr);
  char* in_b = nullptr;
  std::vector<char*> a = fill_one_block(&in_b);
  const PageIndex block_a = block_of(a[0]);
  const PageIndex block_b = block_of(in_b);

  // Freed by another thread, one short of the mark: the owner collects
  // them when B runs out, and A stays full.
  for (uint32_t i = 0; i + 1 < comeback(); ++i) ASSERT_EQ(other->free(a[i]), FreeStatus::kOk);
  other->flush_remote_frees();
  uint32_t from_b = 0;
  char* in_c = alloc_past(block_b, &from_b);
  const PageIndex block_c = block_of(in_c);
  EXPECT_NE(block_c, block_a);

  // One more remote free reaches the mark: when C runs out, A serves.
  ASSERT_EQ(other->free(a[comeback() - 1]), FreeStatus::kOk);
  other->flush_remote_frees();
  uint32_t from_c = 0;
  char* after_c = alloc_past(block_c, &from_c);
  EXPECT_EQ(block_of(after_c), block_a);
  uint32_t from_a = 0;
  (void)alloc_past(block_a, &from_a);
  EXPECT_EQ(from_a + 1, comeback());
  expect_consistent();
}

}  // namespace
}  // namespace memd::heap
