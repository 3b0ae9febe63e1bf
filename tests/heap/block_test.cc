#include "heap/block.h"

#include <gtest/gtest.h>

#include <vector>

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
  EXPECT_EQ(b_.remote_head.load(), 0u);
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

}  // namespace
}  // namespace memd::heap
