// Prefaulting (region/prefaulting_blocks.h) and huge pages on an arena:
// fresh blocks and runs are mapped before the program touches them, only
// when asked for, and what the heap hands out is unchanged (zeros where it
// promises them, data across a growing resize).
#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "heap/thread_heap.h"
#include "region/arena.h"
#include "region/options.h"
#include "region/region.h"
#include "region_test_util.h"

namespace memd::region {
namespace {

// Pages of [p, p + bytes) mapped in this process's page table, by
// /proc/self/pagemap (bit 63: present), without touching them. (mincore
// would say only whether a shared object has the pages, which a shared
// region allocates with the run; what prefaulting adds is the mapping.)
size_t mapped_pages(const void* p, size_t bytes) {
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return SIZE_MAX;
  size_t count = 0;
  uintptr_t first = reinterpret_cast<uintptr_t>(p) / page;
  std::vector<uint64_t> entries((bytes + page - 1) / page);
  ssize_t got = pread(fd, entries.data(), entries.size() * sizeof(uint64_t), static_cast<off_t>(first * 8));
  close(fd);
  if (got != static_cast<ssize_t>(entries.size() * sizeof(uint64_t))) return SIZE_MAX;
  for (uint64_t e : entries) count += (e >> 63) & 1;
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

TEST(PrefaultTest, AFreshRunIsMappedBeforeItIsTouchedOnlyWhenAskedFor) {
  for (bool prefault : {false, true}) {
    ArenaPtr a = make_arena(prefault);
    ASSERT_NE(a, nullptr);
    heap::ThreadHeap* h = a->attach_thread();
    ASSERT_NE(h, nullptr);
    void* p = h->alloc(opaque(kRun));
    ASSERT_NE(p, nullptr);
    size_t pages = kRun / static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_t mapped = mapped_pages(p, kRun);
    if (prefault) {
      EXPECT_EQ(mapped, pages);
      EXPECT_GE(a->pages_prefaulted(), kRun >> 12);
    } else {
      EXPECT_EQ(mapped, 0u) << "pages mapped without prefaulting";
      EXPECT_EQ(a->pages_prefaulted(), 0u);
    }
    // Populated pages read as zero, as fresh ones do.
    const char* c = static_cast<const char*>(p);
    for (size_t i = 0; i < kRun; i += 4096) ASSERT_EQ(c[i], 0) << i;
    h->free(p);
    a->detach_thread(h);
  }
}

TEST(PrefaultTest, FreshBlocksArePopulatedAndObjectsStayIntact) {
  ArenaPtr a = make_arena(true);
  ASSERT_NE(a, nullptr);
  heap::ThreadHeap* h = a->attach_thread();
  ASSERT_NE(h, nullptr);
  std::vector<char*> objects;
  for (int i = 0; i < 4000; ++i) {
    size_t size = 16 + (i % 50) * 640;  // up to 31 KiB: small, medium and large blocks
    char* p = static_cast<char*>(h->alloc(opaque(size)));
    ASSERT_NE(p, nullptr);
    std::memset(p, i & 0xff, size);
    objects.push_back(p);
  }
  EXPECT_GT(a->pages_prefaulted(), 0u);
  for (int i = 0; i < 4000; ++i) {
    size_t size = 16 + (i % 50) * 640;  // up to 31 KiB: small, medium and large blocks
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

// The flags (VmFlags of /proc/self/smaps) of the mapping holding `p`, each
// between spaces; "" if no mapping holds it.
std::string vm_flags_of(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  uintptr_t at = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long long from = 0, to = 0;
    char dash = 0;
    std::istringstream head(line);
    if (line.find(':') == std::string::npos || line.find(' ') < line.find(':')) {
      // A mapping's first line: "from-to perms offset ...".
      if (head >> std::hex >> from >> dash >> to && dash == '-') inside = from <= at && at < to;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line.substr(8) + " ";
  }
  return "";
}

// MEMD_THP marks the process heap's reservation for transparent huge pages
// (VmFlags "hg", MADV_HUGEPAGE), and nothing marks it without.
TEST(PrefaultTest, HugePagesMarkTheReservationOnlyWhenAskedFor) {
  if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) != 0) GTEST_SKIP() << "a kernel without THP";
  for (bool thp : {false, true}) {
    SCOPED_TRACE(thp ? "MEMD_THP=1" : "MEMD_THP=0");
    setenv("MEMD_THP", thp ? "1" : "0", 1);
    ArenaOptions o = process_arena_options();
    unsetenv("MEMD_THP");
    EXPECT_EQ(o.huge_pages, thp);
    o.reserve_bytes = size_t{1} << 30;
    o.max_threads = 8;
    ArenaPtr a(Arena::create(o));
    ASSERT_NE(a, nullptr);
    heap::ThreadHeap* h = a->attach_thread();
    ASSERT_NE(h, nullptr);
    void* p = h->alloc(opaque(kRun));
    ASSERT_NE(p, nullptr);
    std::string flags = vm_flags_of(p);
    ASSERT_NE(flags, "") << "no mapping holds the object";
    EXPECT_EQ(flags.find(" hg ") != std::string::npos, thp) << "VmFlags:" << flags;
    h->free(p);
    a->detach_thread(h);
  }
}

// MEMD_PREFAULT reaches the regions a process allocates in: the owner's
// own allocations and an attached process's leased blocks and runs.
class SharedPrefaultTest : public ::testing::TestWithParam<Discipline> {
 protected:
  void TearDown() override {
    unsetenv("MEMD_PREFAULT");
    if (!name_.empty()) (void)Region::remove(name_, GetParam());
  }
  testing::TempDir dir_;
  std::string name_;
  testing::Events events_;
};

TEST_P(SharedPrefaultTest, OwnerAndAttachedProcessFindFreshRunsMappedOnlyWhenAskedFor) {
  size_t pages = kRun / static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (bool prefault : {false, true}) {
    SCOPED_TRACE(prefault ? "MEMD_PREFAULT=1" : "MEMD_PREFAULT=0");
    setenv("MEMD_PREFAULT", prefault ? "1" : "0", 1);
    name_ = testing::region_name(GetParam(), dir_, "prefault");
    auto r = testing::make_method_region(name_, GetParam(), Method::kBest, &events_, size_t{128} << 20);
    ASSERT_NE(r, nullptr);
    void* own = r->alloc(opaque(kRun));
    ASSERT_NE(own, nullptr);
    EXPECT_EQ(mapped_pages(own, kRun), prefault ? pages : 0);
    std::string sock = dir_.file(prefault ? "owner1.sock" : "owner0.sock");
    ASSERT_TRUE(r->serve(sock).ok());
    fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
      auto a = Region::attach(name_, GetParam(), sock);
      if (!a.ok()) _exit(10);
      void* p = (*a)->alloc(opaque(kRun));
      if (p == nullptr) _exit(11);
      if (mapped_pages(p, kRun) != (prefault ? pages : 0)) _exit(12);
      for (size_t i = 0; i < kRun; i += 4096) {
        if (static_cast<const char*>(p)[i] != 0) _exit(13);
      }
      (*a)->free(p);
      a->reset();
      _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    r->free(own);
    EXPECT_TRUE(r->check().ok()) << r->check();
    r.reset();
    (void)Region::remove(name_, GetParam());
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, SharedPrefaultTest, ::testing::Values(Discipline::kShm, Discipline::kFile),
                         testing::discipline_test_name);

}  // namespace
}  // namespace memd::region
