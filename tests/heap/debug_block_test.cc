// The debug method's block: layout, states, and what the guards catch.
#include "heap/debug_block.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace memd::heap {
namespace {

constexpr uint64_t kSecret = 0x5eed5eed12345678ull;

// A raw allocation as the heap under the method would make it.
struct Raw {
  explicit Raw(const DebugLayout& l) : bytes(l.raw_bytes + 4096) {
    size_t align = l.raw_align ? l.raw_align : 16;
    uintptr_t a = reinterpret_cast<uintptr_t>(bytes.data());
    base = reinterpret_cast<char*>((a + align - 1) / align * align);
  }
  std::vector<char> bytes;
  char* base;
};

TEST(DebugBlockTest, TheUsersBytesAreAlignedAndBetweenIntactGuards) {
  for (size_t align : {size_t{0}, size_t{16}, size_t{64}, size_t{4096}}) {
    for (size_t size : {size_t{0}, size_t{1}, size_t{5}, size_t{100}, size_t{4097}}) {
      DebugLayout l;
      ASSERT_TRUE(debug_layout(size, align, &l));
      EXPECT_EQ(l.raw_bytes % 16, 0u);
      Raw raw(l);
      DebugSite site{"t.c", 4, nullptr};
      char* user = static_cast<char*>(debug_format(raw.base, l, size, site, kSecret));
      EXPECT_EQ(reinterpret_cast<uintptr_t>(user) % (align > 16 ? align : 16), 0u) << size << " " << align;
      EXPECT_LE(user + size + kDebugGuardBytes, raw.base + l.raw_bytes);
      EXPECT_EQ(debug_raw(user), raw.base);
      EXPECT_EQ(debug_state(user, kSecret), DebugState::kLive);
      EXPECT_EQ(debug_header(user)->size, size);
      EXPECT_STREQ(debug_header(user)->site.file, "t.c");
      int64_t bad;
      EXPECT_FALSE(debug_find_overwrite(user, &bad));
      std::memset(user, 0x55, size);  // the whole of what was asked for is the user's
      EXPECT_FALSE(debug_find_overwrite(user, &bad));
    }
  }
}

TEST(DebugBlockTest, AnOverwriteIsFoundAtItsFirstBadByte) {
  DebugLayout l;
  ASSERT_TRUE(debug_layout(4, 0, &l));
  Raw raw(l);
  char* user = static_cast<char*>(debug_format(raw.base, l, 4, DebugSite{}, kSecret));
  int64_t bad = 0;
  std::strcpy(user, "1234");  // Figure 8, line 5: the terminator lands on byte 4
  ASSERT_TRUE(debug_find_overwrite(user, &bad));
  EXPECT_EQ(bad, 4);
  user[4] = static_cast<char>(kDebugGuardByte);
  user[4 + kDebugGuardBytes - 1] = 0;  // the last byte of the back guard
  ASSERT_TRUE(debug_find_overwrite(user, &bad));
  EXPECT_EQ(bad, static_cast<int64_t>(4 + kDebugGuardBytes - 1));
  user[4 + kDebugGuardBytes - 1] = static_cast<char>(kDebugGuardByte);
  user[-3] = 0;  // an underrun: the nearest bad byte before the block
  user[-9] = 0;
  ASSERT_TRUE(debug_find_overwrite(user, &bad));
  EXPECT_EQ(bad, -3);
}

TEST(DebugBlockTest, AFreedBlockReadsFreedAndShowsAWriteAfterFree) {
  DebugLayout l;
  ASSERT_TRUE(debug_layout(32, 0, &l));
  Raw raw(l);
  char* user = static_cast<char*>(debug_format(raw.base, l, 32, DebugSite{}, kSecret));
  debug_mark_freed(user, kSecret);
  EXPECT_EQ(debug_state(user, kSecret), DebugState::kFreed);
  int64_t bad;
  EXPECT_FALSE(debug_find_write_after_free(user, &bad));
  user[17] = 1;
  ASSERT_TRUE(debug_find_write_after_free(user, &bad));
  EXPECT_EQ(bad, 17);
}

TEST(DebugBlockTest, BytesThatAreNoBlockReadAsNone) {
  DebugLayout l;
  ASSERT_TRUE(debug_layout(32, 0, &l));
  Raw raw(l);
  std::memset(raw.base, 0, l.raw_bytes);
  char* user = raw.base + kDebugHeadBytes;
  EXPECT_EQ(debug_state(user, kSecret), DebugState::kNotABlock);
  // A block's header copied elsewhere is not a block there (the state word
  // holds the header's address), nor is a block read with another secret.
  char* real = static_cast<char*>(debug_format(raw.base, l, 32, DebugSite{}, kSecret));
  std::vector<char> copy(l.raw_bytes + 16);
  char* moved = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(copy.data()) + 15) / 16 * 16);
  std::memcpy(moved, raw.base, l.raw_bytes);
  EXPECT_EQ(debug_state(moved + kDebugHeadBytes, kSecret), DebugState::kNotABlock);
  EXPECT_EQ(debug_state(real, kSecret ^ 1), DebugState::kNotABlock);
}

TEST(DebugBlockTest, SizesThatOverflowAreRefused) {
  DebugLayout l;
  EXPECT_FALSE(debug_layout(SIZE_MAX - 10, 0, &l));
  EXPECT_FALSE(debug_layout(SIZE_MAX - kDebugHeadBytes, 64, &l));
  EXPECT_TRUE(debug_layout(size_t{1} << 40, 0, &l));
}

}  // namespace
}  // namespace memd::heap
