// Prefaulting (region/prefaulting_blocks.h) and huge pages on an arena:
// fresh blocks and runs are resident before the program touches them, only
// when asked for, and what the heap hands out is unchanged (zeros where it
// promises them, data across a growing resize).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "heap/thread_heap.h"
#include "region/arena.h"

namespace memd::region {
namespace {

// Resident pages of [p, p + bytes), by mincore, without touching them.
size_t resident_pages(const void* p, size_t bytes) {
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  uintptr_t start = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  size_t n = (reinterpret_cast<uintptr_t>(p) + bytes - start + page - 1) / page;
  std::vector<unsigned char> in(n);
  if (mincore(reinterpret_cast<void*>(start), n * page, in.data()) != 0) return SIZE_MAX;
  size_t count = 0;
  for (unsigned char c : in) count += c & 1;
  return count;
}

struct ArenaDeleter {
  void operator()(Arena* a) const { Arena::destroy(a); }
};
using ArenaPtr = std::unique_ptr<Arena, ArenaDeleter>;

ArenaPtr make_arena(bool prefault, bool huge_pages = false) {
  ArenaOptions o;
  o.reserve_bytes = size_t{1} << 30;
  o.max_threads = 8;
  o.prefault = prefault;
  o.huge_pages = huge_pages;
  return ArenaPtr(Arena::create(o));
}

constexpr size_t kRun = size_t{8} << 20;  // a huge object: a run of its own

// A size the compiler cannot see through: inlined with a constant huge size,
// the fast path's class lookup draws a false -Warray-bounds.
size_t opaque(size_t n) {
  volatile size_t v = n;
  return v;
}

TEST(PrefaultTest, AFreshRunIsResidentBeforeItIsTouchedOnlyWhenAskedFor) {
  for (bool prefault : {false, true}) {
    ArenaPtr a = make_arena(prefault);
    ASSERT_NE(a, nullptr);
    heap::ThreadHeap* h = a->attach_thread();
    ASSERT_NE(h, nullptr);
    void* p = h->alloc(opaque(kRun));
    ASSERT_NE(p, nullptr);
    size_t pages = kRun / static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_t resident = resident_pages(p, kRun);
    if (prefault) {
      EXPECT_EQ(resident, pages);
      EXPECT_GE(a->pages_prefaulted(), kRun >> 12);
    } else {
      EXPECT_LT(resident, pages / 8) << "pages resident without prefaulting";
      EXPECT_EQ(a->pages_prefaulted(), 0u);
    }
    // Populated pages read as zero, as fresh ones do.
    const char* c = static_cast<const char*>(p);
    for (size_t i = 0; i < kRun; i += 4096) ASSERT_EQ(c[i], 0) << i;
    h->free(p);
    a->detach_thread(h);
  }
}

TEST(PrefaultTest, FreshSmallBlocksArePopulatedAndObjectsStayIntact) {
  ArenaPtr a = make_arena(true);
  ASSERT_NE(a, nullptr);
  heap::ThreadHeap* h = a->attach_thread();
  ASSERT_NE(h, nullptr);
  std::vector<char*> objects;
  for (int i = 0; i < 20000; ++i) {
    size_t size = 16 + (i % 50) * 48;
    char* p = static_cast<char*>(h->alloc(opaque(size)));
    ASSERT_NE(p, nullptr);
    std::memset(p, i & 0xff, size);
    objects.push_back(p);
  }
  EXPECT_GT(a->pages_prefaulted(), 0u);
  for (int i = 0; i < 20000; ++i) {
    size_t size = 16 + (i % 50) * 48;
    for (size_t k = 0; k < size; ++k) ASSERT_EQ(static_cast<unsigned char>(objects[i][k]), i & 0xff) << i;
    h->free(objects[i]);
  }
  char message[256];
  EXPECT_TRUE(a->check(message, sizeof message)) << message;
  a->detach_thread(h);
}

TEST(PrefaultTest, AGrowingResizeKeepsItsDataAndZeroesTheRest) {
  for (bool huge_pages : {false, true}) {
    ArenaPtr a = make_arena(true, huge_pages);
    ASSERT_NE(a, nullptr);
    heap::ThreadHeap* h = a->attach_thread();
    ASSERT_NE(h, nullptr);
    size_t have = size_t{1} << 20;
    auto* p = static_cast<unsigned char*>(h->alloc(opaque(have)));
    ASSERT_NE(p, nullptr);
    for (size_t i = 0; i < have; ++i) p[i] = static_cast<unsigned char>(i * 7);
    for (size_t want = have * 2; want <= (size_t{64} << 20); want *= 2) {
      p = static_cast<unsigned char*>(h->realloc(p, want));
      ASSERT_NE(p, nullptr) << want;
      for (size_t i = 0; i < (size_t{1} << 20); i += 509) ASSERT_EQ(p[i], static_cast<unsigned char>(i * 7)) << i;
    }
    void* z = h->alloc_zeroed(size_t{32} << 20);
    ASSERT_NE(z, nullptr);
    const auto* zc = static_cast<const unsigned char*>(z);
    for (size_t i = 0; i < (size_t{32} << 20); i += 4093) ASSERT_EQ(zc[i], 0) << i;
    h->free(z);
    h->free(p);
    char message[256];
    EXPECT_TRUE(a->check(message, sizeof message)) << message;
    a->detach_thread(h);
  }
}

}  // namespace
}  // namespace memd::region
