// memd::Region in one process: create, allocate, named roots, close and
// reopen, read-only attachments, and bad input. Each test runs on the shm,
// file and pmem disciplines.
#include "region/region.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "heap/layout.h"
#include "region_test_util.h"

namespace memd {
namespace {

using testing::region_name;
using testing::small_options;
using testing::TempDir;

class RegionTest : public ::testing::TestWithParam<Discipline> {
 protected:
  void TearDown() override {
    for (const std::string& n : names_) (void)Region::remove(n, GetParam());
  }
  std::string name(const char* stem) {
    names_.push_back(region_name(GetParam(), dir_, stem));
    return names_.back();
  }
  TempDir dir_;
  std::vector<std::string> names_;
};

TEST_P(RegionTest, AllocatesFreesAndChecks) {
  auto r = Region::create(name("basic"), small_options(GetParam()));
  ASSERT_TRUE(r.ok()) << r.status();
  Region& region = **r;
  EXPECT_TRUE(region.is_owner());
  EXPECT_EQ(region.method(), Method::kBest);
  std::mt19937 rng(7);
  std::vector<std::pair<char*, size_t>> live;
  for (int i = 0; i < 20000; ++i) {
    if (live.size() < 2000 || rng() % 2) {
      size_t size = rng() % 4 == 0 ? 8 + rng() % 40000 : 8 + rng() % 512;
      if (i % 997 == 0) size = 300000;  // huge
      auto* p = static_cast<char*>(region.alloc(size));
      ASSERT_NE(p, nullptr);
      ASSERT_TRUE(region.contains(p));
      std::memset(p, static_cast<int>(size & 0xff), size);
      live.emplace_back(p, size);
    } else {
      size_t k = rng() % live.size();
      auto [p, size] = live[k];
      for (size_t j = 0; j < size; j += 61) ASSERT_EQ(static_cast<unsigned char>(p[j]), size & 0xff);
      region.free(p);
      live[k] = live.back();
      live.pop_back();
    }
  }
  EXPECT_TRUE(region.check().ok()) << region.check();
  heap::RegionStats s = region.stat();
  EXPECT_EQ(s.busy_objects, live.size());
  for (auto [p, size] : live) region.free(p);
  EXPECT_TRUE(region.check().ok()) << region.check();
  EXPECT_EQ(region.stat().busy_objects, 0u);
}

TEST_P(RegionTest, OffsetsAreStable) {
  auto r = Region::create(name("offsets"), small_options(GetParam()));
  ASSERT_TRUE(r.ok()) << r.status();
  void* p = (*r)->alloc(100);
  uint64_t off = (*r)->offset_of(p);
  EXPECT_EQ((*r)->at(off), p);
}

struct Point {
  int x, y;
  Point(int a, int b) : x(a), y(b) {}
};

TEST_P(RegionTest, NamedRoots) {
  auto r = Region::create(name("roots"), small_options(GetParam()));
  ASSERT_TRUE(r.ok()) << r.status();
  Region& region = **r;
  Point* p = region.find_or_construct<Point>("origin", 3, 4);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->x, 3);
  // Found again, not constructed again.
  EXPECT_EQ(region.find_or_construct<Point>("origin", 9, 9), p);
  EXPECT_EQ(p->x, 3);
  EXPECT_EQ(region.find<Point>("origin"), p);
  // Another type under the same name is refused.
  errno = 0;
  EXPECT_EQ(region.find<double>("origin"), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(region.find<Point>("nowhere"), nullptr);
  EXPECT_EQ(errno, ENOENT);
  ASSERT_NE(region.find_or_construct<int>("counter", 5), nullptr);
  std::vector<RootInfo> roots = region.list();
  ASSERT_EQ(roots.size(), 2u);
  EXPECT_TRUE(region.destroy<Point>("origin"));
  EXPECT_FALSE(region.destroy<Point>("origin"));
  EXPECT_EQ(region.list().size(), 1u);
  // Names too long or empty.
  EXPECT_EQ(region.find_or_construct<int>(std::string(200, 'x'), 1), nullptr);
  EXPECT_EQ(region.find_or_construct<int>("", 1), nullptr);
  EXPECT_TRUE(region.check().ok()) << region.check();
}

struct Throws {
  explicit Throws(int) { throw std::runtime_error("no"); }
};

TEST_P(RegionTest, AThrowingConstructorLeavesNoRoot) {
  auto r = Region::create(name("throws"), small_options(GetParam()));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THROW((*r)->find_or_construct<Throws>("t", 1), std::runtime_error);
  EXPECT_EQ((*r)->find<Throws>("t"), nullptr);
  EXPECT_TRUE((*r)->list().empty());
  EXPECT_EQ((*r)->stat().busy_objects, 0u);
}

struct Table {
  uint64_t at[1000];
};

// Fills a "table" root with 1000 objects of size_of(i) bytes, each of byte i.
template <typename SizeOf>
void fill_table(Region& r, SizeOf size_of) {
  auto* table = r.find_or_construct<Table>("table");
  ASSERT_NE(table, nullptr);
  for (int i = 0; i < 1000; ++i) {
    auto* p = static_cast<char*>(r.alloc(size_of(i)));
    ASSERT_NE(p, nullptr);
    std::memset(p, i & 0xff, size_of(i));
    table->at[i] = r.offset_of(p);
  }
}

// After a reopen: every object of fill_table whole, the region consistent;
// then half of them freed and `more` objects of `size` allocated.
template <typename SizeOf>
void expect_table_and_go_on(Region& region, SizeOf size_of, int more, size_t size) {
  auto* table = region.find<Table>("table");
  ASSERT_NE(table, nullptr);
  for (int i = 0; i < 1000; ++i) {
    auto* p = static_cast<char*>(region.at(table->at[i]));
    ASSERT_GE(region.size(p), size_of(i)) << i;
    for (size_t j = 0; j < size_of(i); ++j) ASSERT_EQ(static_cast<unsigned char>(p[j]), i & 0xff) << i;
  }
  EXPECT_TRUE(region.check().ok()) << region.check();
  EXPECT_EQ(region.stat().busy_objects, 1001u);
  // The reopened heap allocates and frees as before (adopting the old blocks).
  for (int i = 0; i < 1000; i += 2) region.free(region.at(table->at[i]));
  for (int i = 0; i < more; ++i) ASSERT_NE(region.alloc(size), nullptr);
  EXPECT_TRUE(region.check().ok()) << region.check();
}

TEST_P(RegionTest, CloseAndReopenKeepsObjectsAndRoots) {
  std::string n = name("reopen");
  auto size_of = [](int i) { return size_t(16 + (i * 37) % 3000); };
  uint64_t gen = 0;
  {
    auto r = Region::create(n, small_options(GetParam()));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_NO_FATAL_FAILURE(fill_table(**r, size_of));
    gen = (*r)->generation();
  }
  auto r = Region::open(n, GetParam());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->generation(), gen + 1);
  expect_table_and_go_on(**r, size_of, 3000, 64);
}

// A region made before HeapParams::mid_block_objects existed holds 0 there
// (the header's padding): its mid-size blocks were cut for 4 objects, and a
// reopen keeps every one of them and goes on cutting blocks the same way.
TEST_P(RegionTest, ARegionOfFourObjectBlocksReopensWhole) {
  std::string n = name("four");
  auto size_of = [](int i) { return size_t(600 + (i * 997) % 15000); };
  RegionOptions o = small_options(GetParam());
  o.params.medium_max = 16384;  // the boundaries regions had then
  o.params.large_max = 32768;
  o.params.mid_block_objects = 0;
  {
    auto r = Region::create(n, o);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_NO_FATAL_FAILURE(fill_table(**r, size_of));
  }
  auto r = Region::open(n, GetParam());
  ASSERT_TRUE(r.ok()) << r.status();
  expect_table_and_go_on(**r, size_of, 500, 5000);
}

TEST_P(RegionTest, OnlyOneOwner) {
  std::string n = name("owner");
  auto r = Region::create(n, small_options(GetParam()));
  ASSERT_TRUE(r.ok()) << r.status();
  auto second = Region::open(n, GetParam());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition) << second.status();
}

TEST_P(RegionTest, CreateRefusesAnExistingRegion) {
  std::string n = name("exists");
  auto r = Region::create(n, small_options(GetParam()));
  ASSERT_TRUE(r.ok()) << r.status();
  auto again = Region::create(n, small_options(GetParam()));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists) << again.status();
}

TEST_P(RegionTest, ReadOnlyAttachReadsAndRefusesWrites) {
  std::string n = name("ro");
  auto r = Region::create(n, small_options(GetParam()));
  ASSERT_TRUE(r.ok()) << r.status();
  int* v = (*r)->find_or_construct<int>("v", 42);
  ASSERT_NE(v, nullptr);
  auto ro = Region::attach(n, GetParam(), "", /*read_only=*/true);
  ASSERT_TRUE(ro.ok()) << ro.status();
  EXPECT_TRUE((*ro)->read_only());
  int* seen = (*ro)->find<int>("v");
  ASSERT_NE(seen, nullptr);
  EXPECT_EQ(*seen, 42);
  *v = 43;  // the owner writes; the reader sees it
  EXPECT_EQ(*seen, 43);
  errno = 0;
  EXPECT_EQ((*ro)->alloc(10), nullptr);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ((*ro)->find_or_construct<int>("w", 1), nullptr);
}

int events_seen[8];
void count_event(void*, RegionEvent e, const void*, const char*) { ++events_seen[static_cast<int>(e)]; }

TEST_P(RegionTest, BadFreesAreReportedAsEvents) {
  std::string n = name("badfree");
  auto r = Region::create(n, small_options(GetParam()));
  ASSERT_TRUE(r.ok()) << r.status();
  std::memset(events_seen, 0, sizeof events_seen);
  (*r)->set_event_handler(count_event, nullptr);
  setenv("MEMD_QUIET", "1", 1);
  int local = 0;
  (*r)->free(&local);  // not in the region
  char* p = static_cast<char*>((*r)->alloc(64));
  (*r)->free(p + 8);   // inside an object
  (*r)->free(p);
  (*r)->free(p);       // twice
  EXPECT_EQ(events_seen[static_cast<int>(RegionEvent::kBadAddress)], 3);
  // In the mapping but before the data pages: the region's own header and
  // tables, which no free may touch.
  (*r)->free((*r)->base() + 64);
  EXPECT_EQ(events_seen[static_cast<int>(RegionEvent::kBadAddress)], 4);
  EXPECT_TRUE((*r)->check().ok()) << (*r)->check();
}

TEST_P(RegionTest, APointerFromAnotherRegionIsRefused) {
  auto a = Region::create(name("a"), small_options(GetParam()));
  auto b = Region::create(name("b"), small_options(GetParam()));
  ASSERT_TRUE(a.ok() && b.ok());
  std::memset(events_seen, 0, sizeof events_seen);
  (*a)->set_event_handler(count_event, nullptr);
  setenv("MEMD_QUIET", "1", 1);
  auto* p = static_cast<char*>((*b)->alloc(64));
  std::memset(p, 3, 64);
  (*a)->free(p);
  EXPECT_EQ(events_seen[static_cast<int>(RegionEvent::kBadAddress)], 1);
  EXPECT_EQ((*b)->size(p), 64u);  // still live in its own region
  EXPECT_EQ(p[63], 3);
  EXPECT_TRUE((*a)->check().ok());
  EXPECT_TRUE((*b)->check().ok());
}

// A thread that uses two regions in turn: each call finds that region's own
// heap (the fast path remembers only the last one), and each free goes back
// to the region it came from.
TEST_P(RegionTest, OneThreadUsingTwoRegionsInTurnKeepsEachRegionsObjectsApart) {
  auto a = Region::create(name("turn-a"), small_options(GetParam()));
  auto b = Region::create(name("turn-b"), small_options(GetParam()));
  ASSERT_TRUE(a.ok() && b.ok());
  Region* regions[2] = {a->get(), b->get()};
  std::vector<void*> live[2];
  std::mt19937 rng(11);
  for (int i = 0; i < 20000; ++i) {
    int k = static_cast<int>(rng() % 2);
    if (live[k].size() < 500 || rng() % 2) {
      void* p = regions[k]->alloc(8 + rng() % 600);
      ASSERT_NE(p, nullptr);
      ASSERT_TRUE(regions[k]->contains(p));
      ASSERT_FALSE(regions[1 - k]->contains(p));
      live[k].push_back(p);
    } else {
      size_t j = rng() % live[k].size();
      regions[k]->free(live[k][j]);
      live[k][j] = live[k].back();
      live[k].pop_back();
    }
  }
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(regions[k]->stat().busy_objects, live[k].size());
    EXPECT_TRUE(regions[k]->check().ok()) << regions[k]->check();
    for (void* p : live[k]) regions[k]->free(p);
    EXPECT_EQ(regions[k]->stat().busy_objects, 0u);
  }
}

// A thread that used a region keeps no claim on it once it is closed: with
// the thread still alive, a region opened afterwards (its thread heaps
// made anew) serves that thread from a heap of its own, not the closed
// region's.
TEST_P(RegionTest, AThreadThatUsedAClosedRegionIsServedByTheNextRegionsOwnHeap) {
  std::string first = name("closed-first");
  auto a = Region::create(first, small_options(GetParam()));
  ASSERT_TRUE(a.ok());
  std::atomic<int> step{0};
  std::vector<void*> from_b;
  Region* b_region = nullptr;
  std::thread user([&] {
    (*a)->free((*a)->alloc(48));  // this thread's heap of a, remembered
    step.store(1);
    while (step.load() != 2) std::this_thread::yield();
    for (int i = 0; i < 1000; ++i) from_b.push_back(b_region->alloc(16 + i % 700));
    step.store(3);
  });
  while (step.load() != 1) std::this_thread::yield();
  a->reset();  // closed while the thread that used it lives on
  // Another region's heap is made first and used here, so memory the closed
  // region's heaps held is likely reused by a heap that is not b's: a stale
  // entry that survived the close would send the thread's objects there and
  // fail the checks below, instead of passing by landing on b's heap.
  auto filler = Region::create(name("closed-filler"), small_options(GetParam()));
  ASSERT_TRUE(filler.ok());
  void* kept = (*filler)->alloc(48);
  ASSERT_NE(kept, nullptr);
  auto b = Region::create(name("closed-second"), small_options(GetParam()));
  ASSERT_TRUE(b.ok());
  b_region = b->get();
  step.store(2);
  user.join();
  EXPECT_EQ((*b)->stat().busy_objects, from_b.size());
  EXPECT_TRUE((*b)->check().ok()) << (*b)->check();
  for (size_t i = 0; i < from_b.size(); ++i) {
    ASSERT_NE(from_b[i], nullptr);
    ASSERT_TRUE((*b)->contains(from_b[i]));
    ASSERT_GE((*b)->size(from_b[i]), 16 + i % 700);
    (*b)->free(from_b[i]);
  }
  EXPECT_EQ((*b)->stat().busy_objects, 0u);
  EXPECT_TRUE((*b)->check().ok()) << (*b)->check();
  EXPECT_EQ((*filler)->stat().busy_objects, 1u);  // nothing of the thread's landed there
  (*filler)->free(kept);
}

// Resident memory and disk space follow live data: freed pages are punched
// out of the backing object.
TEST_P(RegionTest, CompactGivesBackingBack) {
  std::string n = name("compact");
  auto r = Region::create(n, small_options(GetParam(), size_t{256} << 20));
  ASSERT_TRUE(r.ok()) << r.status();
  auto backing = [&] {
    std::string path = GetParam() == Discipline::kShm ? "/dev/shm/memd." + n : n;
    struct stat st;
    EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
    return static_cast<size_t>(st.st_blocks) * 512;
  };
  size_t empty = backing();
  std::vector<void*> objs;
  for (int i = 0; i < 100000; ++i) {
    void* p = (*r)->alloc(i % 10 == 0 ? 4000 : 400);
    ASSERT_NE(p, nullptr);
    std::memset(p, 1, i % 10 == 0 ? 4000 : 400);
    objs.push_back(p);
  }
  for (int i = 0; i < 4; ++i) objs.push_back((*r)->alloc(5 << 20));
  size_t full = backing();
  EXPECT_GT(full, empty + (size_t{60} << 20));
  for (void* p : objs) (*r)->free(p);
  (*r)->compact();
  size_t after = backing();
  heap::RegionStats st = (*r)->stat();
  EXPECT_LT(after, empty + (size_t{4} << 20)) << "empty " << empty << " full " << full << " committed "
                                             << st.pages_committed << " dirty " << st.pages_dirty << " discarded "
                                             << st.pages_discarded << " in use " << st.pages_in_use;
  EXPECT_TRUE((*r)->check().ok()) << (*r)->check();
  // And the pages come back when needed.
  void* again = (*r)->alloc(size_t{20} << 20);
  ASSERT_NE(again, nullptr);
  std::memset(again, 2, size_t{20} << 20);
}

TEST_P(RegionTest, OpenAndCloseEvents) {
  std::memset(events_seen, 0, sizeof events_seen);
  RegionOptions o = small_options(GetParam());
  o.event_handler = count_event;
  {
    auto r = Region::create(name("events"), o);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(events_seen[static_cast<int>(RegionEvent::kOpen)], 1);
    EXPECT_EQ(events_seen[static_cast<int>(RegionEvent::kClose)], 0);
  }
  EXPECT_EQ(events_seen[static_cast<int>(RegionEvent::kClose)], 1);
}

TEST_P(RegionTest, PersistAndCheckpoint) {
  auto r = Region::create(name("persist"), small_options(GetParam()));
  ASSERT_TRUE(r.ok()) << r.status();
  auto* p = static_cast<char*>((*r)->alloc(10000));
  std::memset(p, 7, 10000);
  EXPECT_TRUE((*r)->persist(p, 10000).ok());
  EXPECT_TRUE((*r)->checkpoint().ok());
  int local;
  EXPECT_EQ((*r)->persist(&local, sizeof local).code(), absl::StatusCode::kOutOfRange);
}

TEST_P(RegionTest, ExhaustionIsAnErrorAndAnEvent) {
  std::string n = name("full");
  auto r = Region::create(n, small_options(GetParam(), size_t{16} << 20));
  ASSERT_TRUE(r.ok()) << r.status();
  std::memset(events_seen, 0, sizeof events_seen);
  (*r)->set_event_handler(count_event, nullptr);
  int got = 0;
  for (; got < 100; ++got) {
    if ((*r)->alloc(1 << 20) == nullptr) break;
  }
  EXPECT_LT(got, 16);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_GE(events_seen[static_cast<int>(RegionEvent::kNoMemory)], 1);
  EXPECT_NE((*r)->alloc(100), nullptr);  // small objects still fit
  EXPECT_TRUE((*r)->check().ok()) << (*r)->check();
}

INSTANTIATE_TEST_SUITE_P(Disciplines, RegionTest,
                         ::testing::Values(Discipline::kShm, Discipline::kFile, Discipline::kPmem),
                         [](const auto& info) {
                           switch (info.param) {
                             case Discipline::kShm: return std::string("Shm");
                             case Discipline::kFile: return std::string("File");
                             default: return std::string("Pmem");
                           }
                         });

// --- bad input at open ---

class RegionOpenErrors : public ::testing::Test {
 protected:
  TempDir dir_;
};

TEST_F(RegionOpenErrors, NamesWithSlashesOrDotsAreRefused) {
  for (const char* bad : {"a/b", "..", "../x", "", ".hidden"}) {
    auto r = Region::create(bad, testing::small_options(Discipline::kShm));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST_F(RegionOpenErrors, MissingRegion) {
  auto r = Region::open(dir_.file("none"), Discipline::kFile);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
}

TEST_F(RegionOpenErrors, SizeBeyondTheDisciplineLimit) {
  RegionOptions o = testing::small_options(Discipline::kFile);
  o.max_bytes = size_t{1} << 50;
  auto r = Region::create(dir_.file("huge"), o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("limit"), std::string::npos) << r.status();
}

void write_file(const std::string& path, const void* data, size_t n, size_t length) {
  int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, data, n), static_cast<ssize_t>(n));
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(length)), 0);
  ::close(fd);
}

TEST_F(RegionOpenErrors, NotARegion) {
  std::string path = dir_.file("text");
  const char text[] = "hello, this is not a region";
  write_file(path, text, sizeof text, 1 << 20);
  auto r = Region::open(path, Discipline::kFile);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("not a memd region"), std::string::npos) << r.status();
}

TEST_F(RegionOpenErrors, EmptyFile) {
  std::string path = dir_.file("empty");
  write_file(path, "", 0, 0);
  auto r = Region::open(path, Discipline::kFile);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
}

// Makes a real region file, then damages one thing about it.
class DamagedRegion : public RegionOpenErrors {
 protected:
  std::string make() {
    std::string path = dir_.file("r");
    auto r = Region::create(path, testing::small_options(Discipline::kFile, size_t{16} << 20));
    EXPECT_TRUE(r.ok()) << r.status();
    return path;
  }
  template <class T>
  void poke(const std::string& path, size_t offset, T value) {
    int fd = ::open(path.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pwrite(fd, &value, sizeof value, static_cast<off_t>(offset)), static_cast<ssize_t>(sizeof value));
    ::close(fd);
  }
};

TEST_F(DamagedRegion, OtherVersion) {
  std::string path = make();
  poke<uint32_t>(path, offsetof(heap::RegionHeader, version), 99);
  auto r = Region::open(path, Discipline::kFile);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find("version 99"), std::string::npos) << r.status();
}

// A region file as a version-2 build left it: the same layout but for the
// remote lists, which were a 32-bit head at byte 48 of a BlockDesc (chained
// through the objects) with a pending-stack link at byte 56. Its owner's
// open upgrades it in place and collects those objects; until then an
// attachment is refused, saying why.
TEST_F(DamagedRegion, AVersion2RegionIsUpgradedInPlaceByItsOwner) {
  std::string path = dir_.file("v2");
  std::vector<uint64_t> offsets;
  {
    auto r = Region::create(path, testing::small_options(Discipline::kFile, size_t{16} << 20));
    ASSERT_TRUE(r.ok()) << r.status();
    for (int i = 0; i < 40; ++i) {
      auto* p = static_cast<char*>((*r)->alloc(48));
      ASSERT_NE(p, nullptr);
      std::memset(p, i, 48);
      offsets.push_back((*r)->offset_of(p));
    }
  }
  heap::RegionHeader h;
  {
    int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pread(fd, &h, sizeof h, 0), static_cast<ssize_t>(sizeof h));
    ::close(fd);
  }
  // Five objects of the first one's block (1 page for 48-byte objects),
  // freed remotely under version 2: links (in-block offset + 1) and tags.
  const uint64_t block = offsets[0] >> heap::kPageShift;
  std::vector<uint64_t> freed;
  for (uint64_t off : offsets) {
    if (off >> heap::kPageShift == block && freed.size() < 5 && off != offsets[0]) freed.push_back(off);
  }
  ASSERT_EQ(freed.size(), 5u);
  uint32_t head = 0;
  for (uint64_t off : freed) {
    poke<uint32_t>(path, h.data_offset + off, head);
    poke<uint64_t>(path, h.data_offset + off + 8, h.secret ^ off);
    head = static_cast<uint32_t>(off - (block << heap::kPageShift)) + 1;
  }
  const uint64_t desc = h.block_desc_offset + block * sizeof(heap::BlockDesc);
  poke<uint32_t>(path, desc + 48, head);
  poke<uint64_t>(path, desc + 56, 0);
  poke<uint32_t>(path, offsetof(heap::RegionHeader, version), 2);

  auto reader = Region::attach(path, Discipline::kFile, "", /*read_only=*/true);
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kFailedPrecondition) << reader.status();
  EXPECT_NE(reader.status().message().find("upgrades the region in place"), std::string::npos) << reader.status();

  auto r = Region::open(path, Discipline::kFile);
  ASSERT_TRUE(r.ok()) << r.status();
  Region& region = **r;
  EXPECT_TRUE(region.check().ok()) << region.check();
  EXPECT_EQ(region.stat().busy_objects, offsets.size() - freed.size());
  for (size_t i = 0; i < offsets.size(); ++i) {
    bool was_freed = std::find(freed.begin(), freed.end(), offsets[i]) != freed.end();
    auto* p = static_cast<unsigned char*>(region.at(offsets[i]));
    EXPECT_EQ(region.size(p), was_freed ? 0u : 48u) << i;
    if (!was_freed) {
      for (int j = 0; j < 48; ++j) ASSERT_EQ(p[j], i) << i;
    }
  }
  // The freed objects are handed out again (the block is adopted).
  std::vector<uint64_t> again;
  for (int i = 0; i < 200; ++i) again.push_back(region.offset_of(region.alloc(48)));
  for (uint64_t off : freed) EXPECT_NE(std::find(again.begin(), again.end(), off), again.end()) << off;
  EXPECT_TRUE(region.check().ok()) << region.check();
  r->reset();
  int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  uint32_t version = 0;
  ASSERT_EQ(pread(fd, &version, sizeof version, offsetof(heap::RegionHeader, version)), 4);
  ::close(fd);
  EXPECT_EQ(version, heap::kFormatVersion);
}

TEST_F(DamagedRegion, OtherPageSize) {
  std::string path = make();
  poke<uint32_t>(path, offsetof(heap::RegionHeader, page_size), 65536);
  auto r = Region::open(path, Discipline::kFile);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
}

// Cut inside its tables (an object shorter than its reservation is a region
// that has not grown yet; one shorter than its tables is damaged).
TEST_F(DamagedRegion, Truncated) {
  std::string path = make();
  ASSERT_EQ(truncate(path.c_str(), 64 << 10), 0);
  auto r = Region::open(path, Discipline::kFile);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status();
}

TEST_F(DamagedRegion, CorruptOffsets) {
  std::string path = make();
  poke<uint64_t>(path, offsetof(heap::RegionHeader, data_offset), 12345);
  auto r = Region::open(path, Discipline::kFile);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
}

TEST_F(DamagedRegion, WrongDiscipline) {
  std::string path = make();
  auto r = Region::open(path, Discipline::kShm);  // a path is not a shm name
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
}

TEST_F(DamagedRegion, OtherMethod) {
  std::string path = make();
  auto r = Region::open(path, Discipline::kFile, static_cast<Method>(7));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find("method"), std::string::npos) << r.status();
}

TEST_F(DamagedRegion, NoPermission) {
  if (geteuid() == 0) GTEST_SKIP() << "root opens files whatever their mode";
  std::string path = make();
  ASSERT_EQ(chmod(path.c_str(), 0), 0);
  auto r = Region::open(path, Discipline::kFile);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied) << r.status();
}

}  // namespace
}  // namespace memd
