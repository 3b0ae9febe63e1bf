// Online growth: a shared region's backing object starts as long as its
// tables and grows as its heap hands out pages, while other processes have
// it mapped (each maps the whole reservation once and sees new pages without
// a remap); compaction shrinks it over a free tail; growth past the
// reservation, or past what the system allows (a file size limit), is
// refused with errno and an event naming the reason, never a SIGBUS or a
// SIGXFSZ. The processes are real children, the objects real shm objects and
// files.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "region/region.h"
#include "region_test_util.h"
#include "../support/small_file_systems.h"

namespace memd {
namespace {

using testing::TempDir;

constexpr size_t kMiB = size_t{1} << 20;

// The length of a region's backing object now.
size_t object_length(const std::string& name, Discipline d) {
  std::string path = d == Discipline::kShm ? "/dev/shm/memd." + name : name;
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<size_t>(st.st_size) : 0;
}

// Objects every process records, so that the owner can check them all.
struct Ledger {
  static constexpr int kPerProcess = 4096;
  static constexpr int kProcesses = 3;
  struct Entry {
    std::atomic<uint64_t> offset;  // + 1; 0: empty
    uint64_t size;
    uint32_t seed;
  };
  std::atomic<int> ready;
  std::atomic<int> go;
  Entry entry[kProcesses][kPerProcess];
};

// Allocates objects of every kind (huge ones up to 1 MiB) until `bytes` are
// held, records each in the ledger's row, and checks them all at the end.
// 0, or which check failed.
int allocate_and_record(Region& r, Ledger& ledger, int row, size_t bytes, uint32_t seed) {
  std::mt19937 rng(seed);
  size_t held = 0;
  int n = 0;
  while (held < bytes && n < Ledger::kPerProcess) {
    size_t size = testing::pick_object_size(rng, 1 << 20);
    uint32_t s = static_cast<uint32_t>(rng());
    auto* p = static_cast<char*>(r.alloc(size));
    if (p == nullptr) return 20;
    testing::fill_pattern(p, size, s);
    Ledger::Entry& e = ledger.entry[row][n++];
    e.size = size;
    e.seed = s;
    e.offset.store(r.offset_of(p) + 1, std::memory_order_release);
    held += size;
  }
  for (int i = 0; i < n; ++i) {
    const Ledger::Entry& e = ledger.entry[row][i];
    if (!testing::pattern_intact(static_cast<char*>(r.at(e.offset.load() - 1)), e.size, e.seed)) return 21;
  }
  return held >= bytes ? 0 : 22;
}

const char* kChildEnv = "MEMD_GROWTH_CHILD";

// A client: attaches while the object is still short, waits for the go, then
// allocates while the owner and the other client do too.
int client_work(const std::string& args) {
  size_t a = args.find('|'), b = args.find('|', a + 1), c = args.find('|', b + 1);
  std::string name = args.substr(0, a), socket = args.substr(a + 1, b - a - 1);
  auto d = static_cast<Discipline>(std::atoi(args.substr(b + 1, c - b - 1).c_str()));
  int row = std::atoi(args.substr(c + 1).c_str());
  auto r = Region::attach(name, d, socket);
  if (!r.ok()) {
    fprintf(stderr, "client %d: %s\n", row, std::string(r.status().message()).c_str());
    return 10;
  }
  Ledger* ledger = (*r)->find<Ledger>("ledger");
  if (ledger == nullptr) return 11;
  ledger->ready.fetch_add(1);
  while (ledger->go.load() == 0) std::this_thread::yield();
  return allocate_and_record(**r, *ledger, row, 48 * kMiB, 100 + row);
}

TEST(GrowthChild, Run) {
  const char* args = getenv(kChildEnv);
  if (args == nullptr) GTEST_SKIP() << "runs only as the child of GrowthTest";
  _exit(client_work(args));
}

class GrowthTest : public ::testing::TestWithParam<Discipline> {
 protected:
  TempDir dir_;
  std::string name_ = testing::region_name(GetParam(), dir_, "growth");
  void TearDown() override { (void)Region::remove(name_, GetParam()); }
};

TEST_P(GrowthTest, TheObjectStartsAtItsTablesGrowsWithUseAndShrinksAtCompaction) {
  auto r = Region::create(name_, testing::small_options(GetParam(), 256 * kMiB));
  ASSERT_TRUE(r.ok()) << r.status();
  const size_t tables = object_length(name_, GetParam());
  ASSERT_GT(tables, 0u);
  EXPECT_LT(tables, 256 * kMiB / 16) << "a new region's object holds its tables, not its reservation";

  std::vector<void*> big;
  for (int i = 0; i < 40; ++i) {
    void* p = (*r)->alloc(kMiB);
    ASSERT_NE(p, nullptr) << i;
    std::memset(p, i, kMiB);
    big.push_back(p);
  }
  const size_t grown = object_length(name_, GetParam());
  EXPECT_EQ((*r)->object_bytes(), grown) << "the owner's own view of the length is exact";
  EXPECT_GE(grown, tables + 40 * kMiB);
  EXPECT_LE(grown, 256 * kMiB);
  ASSERT_TRUE((*r)->check().ok()) << (*r)->check();

  // Free the second half: the free tail is given back at compaction.
  for (size_t i = 20; i < big.size(); ++i) (*r)->free(big[i]);
  big.resize(20);
  (*r)->compact();
  const size_t shrunk = object_length(name_, GetParam());
  EXPECT_EQ((*r)->object_bytes(), shrunk);
  EXPECT_LE(shrunk, grown - 16 * kMiB) << "compaction cut the free tail";
  EXPECT_GE(shrunk, tables + 20 * kMiB);
  for (size_t i = 0; i < big.size(); ++i) {
    auto* p = static_cast<unsigned char*>(big[i]);
    ASSERT_TRUE(p[0] == i && p[kMiB - 1] == i) << i;
  }
  ASSERT_TRUE((*r)->check().ok()) << (*r)->check();

  // It grows again over the pages it gave back, and they read as zero.
  for (int i = 0; i < 20; ++i) {
    auto* p = static_cast<unsigned char*>((*r)->alloc_zeroed(kMiB));
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(p[0] == 0 && p[kMiB / 2] == 0 && p[kMiB - 1] == 0) << i;
    big.push_back(p);
  }
  EXPECT_GE(object_length(name_, GetParam()), tables + 40 * kMiB);
  ASSERT_TRUE((*r)->check().ok()) << (*r)->check();
  if (GetParam() == Discipline::kShm) return;

  // A file region reopens at whatever length it has, objects intact.
  std::vector<uint64_t> offsets;
  for (void* p : big) offsets.push_back((*r)->offset_of(p));
  for (size_t i = 0; i < 20; ++i) std::memset(big[i], static_cast<int>(i), kMiB);
  r->reset();
  auto again = Region::open(name_, GetParam());
  ASSERT_TRUE(again.ok()) << again.status();
  for (size_t i = 0; i < 20; ++i) {
    auto* p = static_cast<unsigned char*>((*again)->at(offsets[i]));
    ASSERT_TRUE(p[0] == i && p[kMiB - 1] == i) << i;
  }
  EXPECT_TRUE((*again)->check().ok()) << (*again)->check();
}

TEST_P(GrowthTest, TwoProcessesAllocateWhileTheRegionGrows) {
  auto r = Region::create(name_, testing::small_options(GetParam(), 512 * kMiB));
  ASSERT_TRUE(r.ok()) << r.status();
  Region& owner = **r;
  std::string socket = dir_.file("growth.sock");
  ASSERT_TRUE(owner.serve(socket).ok());
  Ledger* ledger = owner.find_or_construct<Ledger>("ledger");
  ASSERT_NE(ledger, nullptr);
  const size_t tables = object_length(name_, GetParam());

  // Both clients map the region while its object is still short.
  std::vector<pid_t> children;
  for (int row = 1; row <= 2; ++row) {
    std::string args = name_ + "|" + socket + "|" + std::to_string(static_cast<int>(GetParam())) + "|" +
                       std::to_string(row);
    pid_t pid = testing::spawn_self("GrowthChild.*", {std::string(kChildEnv) + "=" + args});
    ASSERT_GT(pid, 0);
    children.push_back(pid);
  }
  ASSERT_TRUE(testing::eventually([&] { return ledger->ready.load() == 2; }));
  EXPECT_LT(object_length(name_, GetParam()), tables + 16 * kMiB);
  ledger->go.store(1);
  // The owner allocates too, at the same time.
  EXPECT_EQ(allocate_and_record(owner, *ledger, 0, 32 * kMiB, 7), 0);
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << status;
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }

  // The object grew under all three, and every object each of them made is
  // live and intact.
  EXPECT_GE(object_length(name_, GetParam()), tables + (32 + 2 * 48) * kMiB);
  int checked = 0;
  for (auto& row : ledger->entry) {
    for (const Ledger::Entry& e : row) {
      uint64_t off = e.offset.load();
      if (off == 0) continue;
      auto* p = static_cast<char*>(owner.at(off - 1));
      ASSERT_GE(owner.size(p), e.size);
      ASSERT_TRUE(testing::pattern_intact(p, e.size, e.seed)) << off;
      ++checked;
    }
  }
  EXPECT_GT(checked, 300);
  EXPECT_TRUE(owner.check().ok()) << owner.check();
}

// The events a region's handler hears, with what they said.
struct Heard {
  std::mutex mu;
  std::vector<std::string> no_memory;
  static void on(void* ctx, RegionEvent e, const void*, const char* what) {
    auto* h = static_cast<Heard*>(ctx);
    if (e != RegionEvent::kNoMemory) return;
    std::lock_guard<std::mutex> l(h->mu);
    h->no_memory.emplace_back(what ? what : "");
  }
  bool said(const char* text) {
    std::lock_guard<std::mutex> l(mu);
    for (const std::string& s : no_memory) {
      if (s.find(text) != std::string::npos) return true;
    }
    return false;
  }
};

TEST_P(GrowthTest, GrowthPastTheReservationIsRefusedWithENOMEM) {
  auto r = Region::create(name_, testing::small_options(GetParam(), 64 * kMiB));
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<void*> held;
  void* p;
  errno = 0;
  while ((p = (*r)->alloc(kMiB)) != nullptr) held.push_back(p);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_GT(held.size(), 40u);
  EXPECT_LE(object_length(name_, GetParam()), 64 * kMiB);
  EXPECT_TRUE((*r)->check().ok()) << (*r)->check();
  (*r)->free(held.back());
  EXPECT_NE((*r)->alloc(kMiB), nullptr) << "room again once an object is freed";
}

// A file size limit (RLIMIT_FSIZE, what a quota looks like from inside one
// process) stops growth with EFBIG and an event naming it, and not with the
// SIGXFSZ that would end the process. Lifting it lets the region grow again.
TEST_P(GrowthTest, AFileSizeLimitRefusesGrowthWithAnEventNamingIt) {
  Heard heard;
  RegionOptions o = testing::small_options(GetParam(), 256 * kMiB);
  o.event_handler = Heard::on;
  o.event_context = &heard;
  auto r = Region::create(name_, o);
  ASSERT_TRUE(r.ok()) << r.status();
  const size_t tables = object_length(name_, GetParam());
  struct rlimit before;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &before), 0);
  struct rlimit limited = before;
  limited.rlim_cur = tables + 24 * kMiB;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limited), 0);
  std::vector<void*> held;
  void* p;
  errno = 0;
  while (held.size() < 200 && (p = (*r)->alloc(kMiB)) != nullptr) {
    std::memset(p, 1, kMiB);
    held.push_back(p);
  }
  int error = errno;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &before), 0);
  EXPECT_LE(held.size(), 24u);
  EXPECT_GT(held.size(), 8u);
  EXPECT_EQ(error, EFBIG) << "errno names the reason: the file would be too large";
  EXPECT_TRUE(heard.said("RLIMIT_FSIZE")) << "the event names the limit";
  EXPECT_LE(object_length(name_, GetParam()), tables + 24 * kMiB);
  EXPECT_TRUE((*r)->check().ok()) << (*r)->check();
  for (int i = 0; i < 30; ++i) ASSERT_NE((*r)->alloc(kMiB), nullptr) << i;
  EXPECT_GE(object_length(name_, GetParam()), tables + 40 * kMiB);
}

INSTANTIATE_TEST_SUITE_P(Disciplines, GrowthTest, ::testing::Values(Discipline::kShm, Discipline::kFile),
                         testing::discipline_test_name);

// A full file system: two regions on a 12 MiB tmpfs (each may reserve at
// most what the file system holds); the second grows until the file system
// has no more room, and then allocation fails with ENOMEM and an event
// saying so, never a SIGBUS; once the first gives its pages back (free,
// compact: its object shrinks), the second grows again. Run in a child with
// a mount namespace of its own.
const char* kFullChildEnv = "MEMD_GROWTH_FULL_DIR";
constexpr int kCannotMount = 77;

int fill_the_file_system(const std::string& dir) {
  if (!testing::enter_small_file_systems({dir}, "12m").empty()) return kCannotMount;
  auto first = Region::create(dir + "/first.region", testing::small_options(Discipline::kFile, 12 * kMiB));
  if (!first.ok()) return 10;
  std::vector<void*> theirs;
  for (int i = 0; i < 6; ++i) {
    void* p = (*first)->alloc(kMiB);
    if (p == nullptr) return 11;
    std::memset(p, 6, kMiB);
    theirs.push_back(p);
  }
  Heard heard;
  RegionOptions o = testing::small_options(Discipline::kFile, 12 * kMiB);
  o.event_handler = Heard::on;
  o.event_context = &heard;
  auto r = Region::create(dir + "/second.region", o);
  if (!r.ok()) return 12;
  std::vector<void*> held;
  void* p;
  errno = 0;
  while (held.size() < 20 && (p = (*r)->alloc(kMiB)) != nullptr) {
    std::memset(p, 7, kMiB);  // every page handed out is backed
    held.push_back(p);
  }
  if (errno != ENOMEM) return 13;
  if (held.size() < 2 || held.size() > 6) return 14;
  if (!heard.said("file system is full")) return 15;
  if (!(*r)->check().ok()) return 16;
  // The first region gives its pages back: its object shrinks.
  for (void* q : theirs) (*first)->free(q);
  (*first)->compact();
  for (int i = 0; i < 4; ++i) {
    void* again = (*r)->alloc(kMiB);
    if (again == nullptr) return 17;
    std::memset(again, 8, kMiB);
  }
  return (*r)->check().ok() && (*first)->check().ok() ? 0 : 18;
}

TEST(GrowthFullChild, Run) {
  const char* dir = getenv(kFullChildEnv);
  if (dir == nullptr) GTEST_SKIP() << "runs only as the child of GrowthOnAFullFileSystem";
  _exit(fill_the_file_system(dir));
}

TEST(GrowthOnAFullFileSystem, AllocationFailsWithENOMEMAndAnEventNotASigbus) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  int status = testing::run_self("GrowthFullChild.*", {std::string(kFullChildEnv) + "=" + dir.path()});
  if (WIFEXITED(status) && WEXITSTATUS(status) == kCannotMount) GTEST_SKIP() << "no mount namespace here";
  ASSERT_FALSE(WIFSIGNALED(status)) << "killed by signal " << WTERMSIG(status);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "which check failed: fill_the_file_system";
}

// A file region cut while no one had it open, as a power cut can leave it
// (the growth of the file never reached the disk, the descriptors written
// after it did): a free tail past the new end is cut from the heap too; a
// live object reaching past it is gone, and counted lost like a crash's.
class CutFileTest : public ::testing::Test {
 protected:
  TempDir dir_;
  std::string path_ = dir_.file("cut.region");
  uint64_t kept_offset_ = 0;
  size_t kept_end_ = 0;  // object bytes up to the end of the kept object's pages

  void SetUp() override {
    auto r = Region::create(path_, testing::small_options(Discipline::kFile, 128 * kMiB));
    ASSERT_TRUE(r.ok()) << r.status();
    auto* kept = static_cast<char*>((*r)->alloc(4 * kMiB));
    void* tail = (*r)->alloc(8 * kMiB);
    ASSERT_NE(kept, nullptr);
    ASSERT_NE(tail, nullptr);
    ASSERT_GT((*r)->offset_of(tail), (*r)->offset_of(kept));
    testing::fill_pattern(kept, 4 * kMiB, 5);
    kept_offset_ = (*r)->offset_of(kept);
    (*r)->free(tail);  // free, but not compacted: still committed
    struct stat st;
    ASSERT_EQ(::stat(path_.c_str(), &st), 0);
    size_t data_offset = static_cast<size_t>(st.st_size) - (*r)->stat().pages_committed * 4096;
    kept_end_ = data_offset + kept_offset_ + 4 * kMiB;
  }
};

TEST_F(CutFileTest, AFreeTailPastTheEndIsCutFromTheHeapToo) {
  ASSERT_EQ(truncate(path_.c_str(), static_cast<off_t>(kept_end_)), 0);
  auto r = Region::open(path_, Discipline::kFile);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(testing::pattern_intact(static_cast<char*>((*r)->at(kept_offset_)), 4 * kMiB, 5));
  EXPECT_TRUE((*r)->check().ok()) << (*r)->check();
  // It grows again from there.
  for (int i = 0; i < 12; ++i) ASSERT_NE((*r)->alloc(kMiB), nullptr) << i;
  EXPECT_TRUE((*r)->check().ok()) << (*r)->check();
  EXPECT_TRUE(testing::pattern_intact(static_cast<char*>((*r)->at(kept_offset_)), 4 * kMiB, 5));
}

TEST_F(CutFileTest, AnObjectCutThroughIsLostCountedAndItsPagesReused) {
  ASSERT_EQ(truncate(path_.c_str(), static_cast<off_t>(kept_end_ - kMiB)), 0);
  auto r = Region::open(path_, Discipline::kFile);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->size((*r)->at(kept_offset_)), 0u) << "the cut object is no longer live";
  EXPECT_EQ((*r)->header_facts().leaked_objects, 1u);
  EXPECT_TRUE((*r)->check().ok()) << (*r)->check();
  std::vector<void*> again;
  for (int i = 0; i < 16; ++i) {
    void* p = (*r)->alloc(kMiB);
    ASSERT_NE(p, nullptr) << i;
    std::memset(p, 3, kMiB);  // its pages past the old end exist again
    again.push_back(p);
  }
  EXPECT_TRUE((*r)->check().ok()) << (*r)->check();
}

}  // namespace
}  // namespace memd
