// The debug and profile methods in shared and file regions (Vmalloc's
// Vmdebug and Vmprofile with their books in the region): reports name the
// site that allocated an object in another process, double frees and stray
// pointers are told apart and refused, every process counts into one
// profile, a file region keeps its method and its books across a reopen,
// and a process killed at a random instant leaves the region checkable.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "heap/crash_point.h"
#include "heap/debug_block.h"
#include "heap/site_table.h"
#include "region/call_site.h"
#include "region/region.h"
#include "region/region_internals.h"
#include "region_test_util.h"

namespace memd {
namespace {

using testing::region_name;
using testing::small_options;
using testing::Events;
using testing::TempDir;


// Offsets children post for the parent (+1; 0: not yet).
struct Box {
  std::atomic<uint64_t> off[8];
  std::atomic<int> ready{0};
};

std::string hex(const void* p) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  return b;
}

std::string read_fd_file(FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  return out;
}

class DebugMethodTest : public ::testing::TestWithParam<Discipline> {
 protected:
  void TearDown() override { (void)Region::remove(name_, GetParam()); }
  std::unique_ptr<Region> make(Method m) {
    name_ = region_name(GetParam(), dir_, "debug");
    return make_method_region(name_, GetParam(), m, &events_, size_t{128} << 20);
  }
  // Serves r on a socket and runs fn(attached region, box) in a child;
  // returns the child's pid.
  template <class Fn>
  pid_t child(Region& r, Fn fn) {
    if (sock_.empty()) {
      sock_ = dir_.file("owner.sock");
      EXPECT_TRUE(r.serve(sock_).ok());
    }
    fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
      auto a = Region::attach(name_, GetParam(), sock_);
      if (!a.ok()) _exit(10);
      Box* box = (*a)->find<Box>("box");
      if (box == nullptr) _exit(11);
      fn(**a, *box);
      a->reset();
      _exit(0);
    }
    return pid;
  }
  static void join(pid_t pid) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  TempDir dir_;
  std::string name_, sock_;
  Events events_;
};

TEST_P(DebugMethodTest, AnOverwriteIsReportedWithTheSiteThatAllocatedItInAnotherProcess) {
  auto r = make(Method::kDebug);
  ASSERT_NE(r, nullptr);
  Box* box = r->find_or_construct<Box>("box");
  ASSERT_NE(box, nullptr);
  join(child(*r, [](Region& a, Box& b) {
    region::CallSiteScope at(heap::DebugSite{"child.c", 12, nullptr});
    auto* over = static_cast<char*>(a.alloc(10));
    auto* under = static_cast<char*>(a.alloc(24));
    auto* fine = static_cast<char*>(a.alloc(24));
    if (over == nullptr || under == nullptr || fine == nullptr) _exit(12);
    std::memset(over, 'x', 11);  // one past its end
    under[-1] = 'u';             // one before its start
    std::memset(fine, 'f', 24);
    b.off[0] = a.offset_of(over) + 1, b.off[1] = a.offset_of(under) + 1, b.off[2] = a.offset_of(fine) + 1;
  }));
  void* over = r->at(box->off[0] - 1);
  void* under = r->at(box->off[1] - 1);
  void* fine = r->at(box->off[2] - 1);
  EXPECT_EQ(r->size(over), 10u);
  ::testing::internal::CaptureStderr();
  {
    region::CallSiteScope at(heap::DebugSite{"parent.c", 30, nullptr});
    r->free(over);
    r->free(under);
    r->free(fine);
  }
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("memd: corrupted data:region=" + name_ + ":block=" + hex(over) +
                     ":bad byte at=10:allocated at=child.c,12:detected at=parent.c,30:\n"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("memd: corrupted data:region=" + name_ + ":block=" + hex(under) +
                     ":bad byte at=-1:allocated at=child.c,12:detected at=parent.c,30:\n"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find(hex(fine)), std::string::npos) << err;
  // An overwrite is reported, the object still freed: nothing is live.
  EXPECT_EQ(r->method_stats().live_objects, 0u);
  EXPECT_EQ(events_.bad.load(), 0);
  EXPECT_TRUE(r->check().ok()) << r->check();
}

TEST_P(DebugMethodTest, DoubleFreesAndStrayPointersAreReportedAndRefused) {
  auto r = make(Method::kDebug);
  ASSERT_NE(r, nullptr);
  region::CallSiteScope at(heap::DebugSite{"t.c", 7, nullptr});
  std::vector<void*> keep;
  for (int i = 0; i < 100; ++i) keep.push_back(r->alloc(40));  // neighbours for the stray pointer
  void* p = r->alloc(40);
  void* big = r->alloc(200000);  // a huge run, freed twice too
  ASSERT_NE(p, nullptr);
  ASSERT_NE(big, nullptr);
  r->free(p);
  r->free(big);
  ::testing::internal::CaptureStderr();
  r->free(p);
  r->free(static_cast<char*>(keep[3]) + 16);
  int x = 0;
  r->free(&x);
  r->free(big);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("memd: free error:region=" + name_ + ":block=" + hex(big) + ":already freed:"), std::string::npos)
      << err;
  EXPECT_NE(err.find("memd: free error:region=" + name_ + ":block=" + hex(p) + ":already freed:detected at=t.c,7:"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("memd: free error:region=" + name_ + ":block=" + hex(static_cast<char*>(keep[3]) + 16) +
                     ":unallocated block:detected at=t.c,7:"),
            std::string::npos)
      << err;
  EXPECT_EQ(events_.bad.load(), 4);
  errno = 0;
  EXPECT_EQ(r->resize(p, 80), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(events_.bad.load(), 5);
  // Nothing refused was freed: the neighbours are intact and live.
  EXPECT_EQ(r->method_stats().live_objects, 100u);
  for (void* k : keep) EXPECT_EQ(r->size(k), 40u);
  for (void* k : keep) r->free(k);
  EXPECT_EQ(events_.bad.load(), 5);
  EXPECT_TRUE(r->check().ok()) << r->check();
}

TEST_P(DebugMethodTest, CheckFindsEveryOverwrittenObjectOfEveryProcessOnce) {
  auto r = make(Method::kDebug);
  ASSERT_NE(r, nullptr);
  Box* box = r->find_or_construct<Box>("box");
  ASSERT_NE(box, nullptr);
  std::vector<void*> mine;
  for (int i = 0; i < 500; ++i) mine.push_back(r->alloc(16 + (i % 7) * 24));
  auto* aligned = static_cast<char*>(r->alloc_aligned(100, 256));
  ASSERT_NE(aligned, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(aligned) % 256, 0u);
  EXPECT_EQ(r->addr(aligned + 50), aligned);
  EXPECT_EQ(r->check_objects(), 0);
  join(child(*r, [](Region& a, Box& b) {
    for (int i = 0; i < 3; ++i) {
      auto* p = static_cast<char*>(a.alloc(i == 2 ? 100000 : 48));  // small, small, large
      if (p == nullptr) _exit(12);
      p[i == 2 ? 100000 : 48] = 1;
      b.off[i] = a.offset_of(p) + 1;
    }
  }));
  aligned[100] = 0;  // past the aligned one too
  static_cast<char*>(mine[77])[-3] = 0;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(r->check_objects(), 5);
  EXPECT_EQ(r->check_objects(), 5);  // still overwritten, reported once
  std::string err = ::testing::internal::GetCapturedStderr();
  size_t lines = 0;
  for (size_t at = err.find("corrupted data"); at != std::string::npos; at = err.find("corrupted data", at + 1)) ++lines;
  EXPECT_EQ(lines, 5u) << err;
  EXPECT_NE(err.find(":block=" + hex(aligned) + ":bad byte at=100:"), std::string::npos) << err;
  EXPECT_NE(err.find(":block=" + hex(mine[77]) + ":bad byte at=-3:"), std::string::npos) << err;
  for (int i = 0; i < 3; ++i) EXPECT_NE(err.find(":block=" + hex(r->at(box->off[i] - 1))), std::string::npos) << err;
  EXPECT_EQ(events_.bad.load(), 0);  // an overwrite is a report, not a refused call
}

TEST_P(DebugMethodTest, WatchedAddressesAndCheckAtEveryCall) {
  auto r = make(Method::kDebug);
  ASSERT_NE(r, nullptr);
  region::CallSiteScope at(heap::DebugSite{"w.c", 3, nullptr});
  auto* p = static_cast<char*>(r->alloc(32));
  ASSERT_TRUE(r->watch(p));
  r->set_debug_options({true, false});
  p[32] = 0;
  ::testing::internal::CaptureStderr();
  void* q = r->alloc(8);  // the check at this call finds p's overwrite
  r->free(p);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("memd: corrupted data:region=" + name_ + ":block=" + hex(p) + ":bad byte at=32:allocated at=w.c,3:\n"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("memd: alert:region=" + name_ + ":block=" + hex(p) + ":size=32:being freed:detected at=w.c,3:"),
            std::string::npos)
      << err;
  r->free(q);
  // Watches are the debug method's: a profile region takes none.
  auto prof = Region::create(name_ + "-p", [&] {
    RegionOptions o = small_options(GetParam());
    o.method = Method::kProfile;
    return o;
  }());
  ASSERT_TRUE(prof.ok()) << prof.status();
  EXPECT_FALSE((*prof)->watch(p));
  EXPECT_EQ((*prof)->check_objects(), -1);
  prof->reset();
  (void)Region::remove(name_ + "-p", GetParam());
}

// What write_profile says, per site line: n_alloc, n_free, s_alloc, s_free.
struct Counts {
  uint64_t n_alloc = 0, n_free = 0, s_alloc = 0, s_free = 0;
};
bool parse_counts(const std::string& text, const std::string& key, Counts* c) {
  std::regex re(key + ":region=[^:]*:n_alloc=(\\d+):n_free=(\\d+):s_alloc=(\\d+):s_free=(\\d+):");
  std::smatch m;
  if (!std::regex_search(text, m, re)) return false;
  *c = {std::stoull(m[1]), std::stoull(m[2]), std::stoull(m[3]), std::stoull(m[4])};
  return true;
}

TEST_P(DebugMethodTest, ProcessesCountIntoOneProfile) {
  auto r = make(Method::kProfile);
  ASSERT_NE(r, nullptr);
  ASSERT_NE(r->find_or_construct<Box>("box"), nullptr);
  std::vector<pid_t> kids;
  for (int c = 0; c < 3; ++c) {
    kids.push_back(child(*r, [c](Region& a, Box&) {
      std::vector<void*> held;
      for (int i = 0; i < 1000; ++i) {
        region::CallSiteScope at(heap::DebugSite{"kid.c", static_cast<uint32_t>(10 + c), nullptr});
        held.push_back(a.alloc(100));
      }
      region::CallSiteScope at(heap::DebugSite{"kid.c", 99, nullptr});
      for (int i = 0; i < 1000; i += 2) a.free(held[i]);  // freed at their own site's books
      void* shared = a.alloc(7);                          // kid.c,99: 3 of them
      (void)shared;
    }));
  }
  for (pid_t k : kids) join(k);
  {
    region::CallSiteScope at(heap::DebugSite{"owner.c", 5, nullptr});
    for (int i = 0; i < 10; ++i) r->free(r->alloc(5000));
  }
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(r->write_profile(fileno(f)).ok());
  std::string text = read_fd_file(f);
  std::fclose(f);
  std::regex total("ALLOCATION USAGE SUMMARY:n_alloc=(\\d+):n_free=(\\d+):s_alloc=(\\d+):s_free=(\\d+):");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, total)) << text;
  EXPECT_EQ(std::stoull(m[1]), 3u * 1001 + 10);
  EXPECT_EQ(std::stoull(m[2]), 3u * 500 + 10);
  EXPECT_EQ(std::stoull(m[3]), 3u * (100000 + 7) + 50000);
  EXPECT_EQ(std::stoull(m[4]), 3u * 50000 + 50000);
  std::regex busy("max_busy=(\\d+):");
  ASSERT_TRUE(std::regex_search(text, m, busy)) << text;
  // At most everything the children held at once, at least one child's.
  EXPECT_GE(std::stoull(m[1]), 100000u);
  EXPECT_LE(std::stoull(m[1]), 3u * 100007 + 5000);
  Counts c;
  for (int k = 0; k < 3; ++k) {
    ASSERT_TRUE(parse_counts(text, "    line=" + std::to_string(10 + k), &c)) << text;
    EXPECT_EQ(c.n_alloc, 1000u);
    EXPECT_EQ(c.n_free, 500u);
    EXPECT_EQ(c.s_alloc, 100000u);
    EXPECT_EQ(c.s_free, 50000u);
  }
  ASSERT_TRUE(parse_counts(text, "    line=99", &c)) << text;
  EXPECT_EQ(c.n_alloc, 3u);
  EXPECT_EQ(c.s_alloc, 21u);
  EXPECT_NE(text.find("file=kid.c:n_alloc=3003:n_free=1500:"), std::string::npos) << text;
  EXPECT_NE(text.find("file=owner.c:n_alloc=10:n_free=10:s_alloc=50000:s_free=50000:"), std::string::npos) << text;
  MethodStats s = r->method_stats();
  EXPECT_EQ(s.method, Method::kProfile);
  EXPECT_EQ(s.live_objects, 3u * 501);
  EXPECT_EQ(s.used_bytes, 3u * 50007);
  // Without a site, the caller's return address names the site, as object+offset.
  r->free(r->alloc(3));
  f = std::tmpfile();
  ASSERT_TRUE(r->write_profile(fileno(f)).ok());
  text = read_fd_file(f);
  std::fclose(f);
  EXPECT_NE(text.find("file=<>:n_alloc=1:n_free=1:s_alloc=3:s_free=3:"), std::string::npos) << text;
  EXPECT_TRUE(std::regex_search(text, std::regex("    pc=[^:]+\\+0x[0-9a-f]+:region="))) << text;
  EXPECT_TRUE(r->check().ok()) << r->check();
}

TEST_P(DebugMethodTest, AFileRegionKeepsItsMethodAndItsBooksAcrossAReopen) {
  if (GetParam() == Discipline::kShm) GTEST_SKIP() << "shm regions are not kept across opens here";
  auto r = make(Method::kDebug);
  ASSERT_NE(r, nullptr);
  std::vector<uint64_t> offs;
  {
    region::CallSiteScope at(heap::DebugSite{"before.c", 1, nullptr});
    for (int i = 0; i < 200; ++i) {
      auto* p = static_cast<uint32_t*>(r->alloc(64));
      ASSERT_NE(p, nullptr);
      p[0] = static_cast<uint32_t>(i);
      offs.push_back(r->offset_of(p));
    }
  }
  r.reset();
  auto best = Region::open(name_, GetParam(), Method::kBest);
  ASSERT_FALSE(best.ok());
  EXPECT_NE(best.status().message().find("managed by method debug, asked for method best"), std::string::npos)
      << best.status();
  auto again = Region::open(name_, GetParam(), Method{});
  ASSERT_TRUE(again.ok()) << again.status();
  r = std::move(*again);
  r->set_event_handler(Events::on, &events_);
  EXPECT_EQ(r->method(), Method::kDebug);
  EXPECT_EQ(r->method_stats().live_objects, 200u);
  EXPECT_EQ(r->check_objects(), 0);
  auto* first = static_cast<uint32_t*>(r->at(offs[0]));
  EXPECT_EQ(r->size(first), 64u);
  reinterpret_cast<char*>(first)[64] = 9;
  ::testing::internal::CaptureStderr();
  {
    region::CallSiteScope at(heap::DebugSite{"after.c", 2, nullptr});
    for (size_t i = 0; i < offs.size(); ++i) {
      auto* p = static_cast<uint32_t*>(r->at(offs[i]));
      ASSERT_EQ(p[0], i);
      r->free(p);
    }
  }
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("bad byte at=64:allocated at=before.c,1:detected at=after.c,2:"), std::string::npos) << err;
  EXPECT_EQ(r->method_stats().live_objects, 0u);
  EXPECT_EQ(events_.bad.load(), 0);
  EXPECT_TRUE(r->check().ok()) << r->check();
}

TEST_P(DebugMethodTest, ClearFreesEveryObjectOfEveryProcess) {
  auto r = make(Method::kDebug);
  ASSERT_NE(r, nullptr);
  ASSERT_NE(r->find_or_construct<Box>("box"), nullptr);
  join(child(*r, [](Region& a, Box&) {
    for (int i = 0; i < 300; ++i) (void)a.alloc(i % 3 == 0 ? 3000 : 24);
  }));
  for (int i = 0; i < 100; ++i) ASSERT_NE(r->alloc(40), nullptr);
  EXPECT_EQ(r->method_stats().live_objects, 400u);
  ASSERT_TRUE(r->clear().ok());
  EXPECT_EQ(r->method_stats().live_objects, 0u);
  EXPECT_NE(r->find<Box>("box"), nullptr);  // roots are not the method's
  EXPECT_EQ(events_.bad.load(), 0);
  EXPECT_TRUE(r->check().ok()) << r->check();
}

// A child churning allocations, resizes and frees is killed at a random
// instant: the region stays consistent, no object reads as overwritten,
// and the books are off by at most the one call the child was in.
TEST_P(DebugMethodTest, AProcessKilledAtARandomInstantLeavesTheRegionCheckable) {
  auto r = make(Method::kDebug);
  ASSERT_NE(r, nullptr);
  Box* box = r->find_or_construct<Box>("box");
  ASSERT_NE(box, nullptr);
  pid_t pid = child(*r, [](Region& a, Box& b) {
    std::mt19937 rng(static_cast<unsigned>(getpid()));
    std::vector<char*> held;
    for (uint64_t n = 0;; ++n) {
      if (n == 2000) b.ready = 1;
      uint32_t op = rng() % 3;
      if (op == 0 || held.empty()) {
        size_t size = 1 + rng() % 700;
        auto* p = static_cast<char*>(a.alloc(size));
        if (p != nullptr) std::memset(p, 'a', size), held.push_back(p);
      } else if (op == 1) {
        size_t i = rng() % held.size();
        size_t size = 1 + rng() % 700;
        auto* q = static_cast<char*>(a.resize(held[i], size));
        if (q != nullptr) std::memset(q, 'r', size), held[i] = q;
      } else {
        size_t i = rng() % held.size();
        a.free(held[i]);
        held[i] = held.back();
        held.pop_back();
      }
    }
  });
  while (box->ready.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(std::random_device{}() % 100));
  kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_EQ(r->check_objects(), 0);
  EXPECT_TRUE(r->check().ok()) << r->check();
  uint64_t live_books = r->method_stats().live_objects;
  // Every object the books count as live is one the walk finds live, but
  // for the one call the kill may have cut.
  ASSERT_TRUE(r->clear().ok());
  uint64_t after = r->method_stats().live_objects;
  EXPECT_LE(after, 1u) << "books said " << live_books;
  for (int i = 0; i < 1000; ++i) r->free(r->alloc(1 + i % 500));
  EXPECT_EQ(events_.bad.load(), 0);
  EXPECT_TRUE(r->check().ok()) << r->check();
}

// A process killed inside the debug method's formatting of a new block,
// after its header and front guard and before its back guard (the crash
// point debug.format): the half-made block does not read as a live one
// whose guard was overwritten. The child is a fresh process (crash points
// read MEMD_CRASH_AT once), attached to the region the test serves.
const char* kFormatChildEnv = "MEMD_DEBUG_FORMAT_CRASH_CHILD";

int allocate_until_killed(const std::string& args) {
  size_t a = args.find('|'), b = args.rfind('|');
  auto discipline = static_cast<Discipline>(std::strtol(args.c_str() + a + 1, nullptr, 10));
  auto r = Region::attach(args.substr(0, a), discipline, args.substr(b + 1));
  if (!r.ok()) return 10;
  for (int i = 0; i < 100000; ++i) {
    auto* p = static_cast<char*>((*r)->alloc(1 + i % 600));
    if (p == nullptr) return 11;
    std::memset(p, 'c', 1 + i % 600);
  }
  return 12;  // the crash point was never reached
}

TEST(DebugFormatCrashChild, Run) {
  const char* args = getenv(kFormatChildEnv);
  if (args == nullptr) GTEST_SKIP() << "runs only as the child of DebugMethodTest";
  _exit(allocate_until_killed(args));
}

TEST_P(DebugMethodTest, AProcessKilledWhileItFormatsABlockLeavesNoHalfMadeLiveBlock) {
  auto r = make(Method::kDebug);
  ASSERT_NE(r, nullptr);
  sock_ = dir_.file("owner.sock");
  ASSERT_TRUE(r->serve(sock_).ok());
  for (int pass : {1, 37, 500}) {
    std::string args = name_ + "|" + std::to_string(static_cast<int>(GetParam())) + "|" + sock_;
    int status = testing::run_self("DebugFormatCrashChild.*", {std::string(kFormatChildEnv) + "=" + args,
                                                               "MEMD_CRASH_AT=debug.format:" + std::to_string(pass)});
    ASSERT_TRUE(WIFEXITED(status)) << status;
    ASSERT_EQ(WEXITSTATUS(status), heap::kCrashExitCode) << "the child did not die at debug.format:" << pass;
    EXPECT_EQ(r->check_objects(), 0) << "after a kill at pass " << pass;
    EXPECT_TRUE(r->check().ok()) << r->check();
  }
  EXPECT_EQ(events_.bad.load(), 0);
}

// Every process of a region can write its memory: one that scribbles over
// the site table and over objects' headers, or forges headers with the
// region's secret, costs the others their reports' accuracy but never a
// crash, a read outside the region, or a block the heap hands out twice.
// The secret every block's state word is mixed with is read once, when a
// process maps the region: a stray write to the header's copy afterwards
// (any process of the region can make one) leaves every live block this
// process knows recognisable, so none leaks, and a double free is still one.
TEST_P(DebugMethodTest, ARewrittenSecretLeavesTheOpenRegionsBlocksRecognisable) {
  auto r = make(Method::kDebug);
  ASSERT_NE(r, nullptr);
  region::CallSiteScope at(heap::DebugSite{"t.c", 9, nullptr});
  std::vector<void*> live;
  for (int i = 0; i < 64; ++i) live.push_back(r->alloc(16 + 24 * i));
  void* twice = r->alloc(40);
  ASSERT_NE(twice, nullptr);
  RegionImpl* impl = RegionInternals::of(*r);
  impl->region.header->secret ^= 0x5a5a5a5a5a5a5a5aull;
  // A process that maps the region after the write reads the new secret;
  // the blocks stay this process's to free.
  EXPECT_EQ(r->method_stats().live_objects, 65u);
  EXPECT_EQ(r->check_objects(), 0);
  for (void* p : live) EXPECT_GE(r->size(p), 16u);
  for (void* p : live) r->free(p);
  r->free(twice);
  EXPECT_EQ(events_.bad.load(), 0);
  ::testing::internal::CaptureStderr();
  r->free(twice);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(":block=" + hex(twice) + ":already freed:"), std::string::npos) << err;
  EXPECT_EQ(events_.bad.load(), 1);
  EXPECT_EQ(r->method_stats().live_objects, 0u);
  EXPECT_TRUE(r->check().ok()) << r->check();
}

TEST_P(DebugMethodTest, AClientScribblingOverTheBooksAndHeadersCrashesNoOne) {
  auto r = make(Method::kDebug);
  ASSERT_NE(r, nullptr);
  constexpr int kObjects = 256;
  struct Objects {
    std::atomic<uint64_t> off[kObjects];
    uint64_t size[kObjects];
  };
  auto* objects = r->find_or_construct<Objects>("objects");
  ASSERT_NE(r->find_or_construct<Box>("box"), nullptr);
  ASSERT_NE(objects, nullptr);
  {
    region::CallSiteScope at(heap::DebugSite{"honest.c", 7, nullptr});
    for (int i = 0; i < kObjects; ++i) {
      size_t size = 16 + (i * 37) % 3000;
      void* p = i % 5 == 0 ? r->alloc_aligned(size, 256) : r->alloc(size);
      ASSERT_NE(p, nullptr);
      std::memset(p, 'h', size);
      objects->off[i] = r->offset_of(p);
      objects->size[i] = size;
    }
  }
  // The attacker: a client of the region with the same mapping.
  join(child(*r, [](Region& a, Box&) {
    auto* objs = a.find<Objects>("objects");
    auto* table = static_cast<unsigned char*>(RegionInternals::method_state(a));
    if (objs == nullptr || table == nullptr) _exit(20);
    std::mt19937_64 rng(42);
    for (size_t i = 0; i < sizeof(heap::SiteTable); ++i) table[i] = static_cast<unsigned char>(rng());
    RegionImpl* impl = RegionInternals::of(a);
    uint64_t secret = impl->region.header->secret;
    auto origin = reinterpret_cast<uintptr_t>(impl->region.data);
    for (int i = 0; i < kObjects; ++i) {
      auto* user = static_cast<unsigned char*>(a.at(objs->off[i]));
      unsigned char* head = user - heap::kDebugHeadBytes;
      switch (i % 4) {
        case 0:  // random bytes over the header, the lead mark and the front guard
          for (size_t b = 0; b < heap::kDebugHeadBytes; ++b) head[b] = static_cast<unsigned char>(rng());
          break;
        case 1: {  // a well-formed header claiming a size past the region's end
          heap::DebugLayout l;
          if (!heap::debug_layout(16, 16, &l)) _exit(21);
          (void)heap::debug_format(head, l, 16, heap::DebugSite{}, secret, origin);
          heap::debug_header(user)->size = uint64_t{1} << 62;
          break;
        }
        case 2:  // a live header naming a site index past the table
          heap::debug_header(user)->flags = 0xffffff00u | static_cast<uint32_t>(rng() & 0xfe);
          break;
        case 3: {  // a forged block in the middle of this object
          if (objs->size[i] < 256) break;
          heap::DebugLayout l;
          if (!heap::debug_layout(32, 16, &l)) _exit(22);
          (void)heap::debug_format(user + 128 - heap::kDebugHeadBytes, l, 32, heap::DebugSite{}, secret, origin);
          break;
        }
      }
    }
  }));
  // Everything the others do still works and reads only the region.
  (void)r->check_objects();
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(r->write_profile(fileno(f)).ok());
  EXPECT_NE(read_fd_file(f).find("ALLOCATION USAGE SUMMARY:"), std::string::npos);
  std::fclose(f);
  ::testing::internal::CaptureStderr();
  int refused = 0, forged_refused = 0, expect_refused = 0;
  for (int i = 0; i < kObjects; ++i) {
    auto* user = static_cast<char*>(r->at(objects->off[i]));
    if (i % 4 == 3 && objects->size[i] >= 256) {
      // The forged block is no object of the heap's: refused, and the
      // object around it stays live.
      int before = events_.bad.load();
      r->free(user + 128);
      forged_refused += events_.bad.load() - before;
      EXPECT_EQ(r->size(user), objects->size[i]) << i;
    }
    int before = events_.bad.load();
    r->free(user);
    refused += events_.bad.load() - before;
    if (i % 4 == 0 || i % 4 == 1) ++expect_refused;
  }
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(refused, expect_refused) << err;
  int forged = 0;
  for (int i = 3; i < kObjects; i += 4) forged += objects->size[i] >= 256;
  EXPECT_GT(forged, 0);
  EXPECT_EQ(forged_refused, forged) << err;
  // The heap's own books are intact: allocations go on, none overlaps a
  // live one, and the region checks.
  std::vector<std::pair<char*, size_t>> fresh;
  for (int i = 0; i < 2000; ++i) {
    size_t size = 1 + (i * 53) % 2000;
    auto* p = static_cast<char*>(r->alloc(size));
    ASSERT_NE(p, nullptr);
    std::memset(p, static_cast<int>(i & 0xff), size);
    fresh.emplace_back(p, size);
  }
  for (size_t i = 0; i < fresh.size(); ++i) {
    for (size_t b = 0; b < fresh[i].second; ++b) ASSERT_EQ(fresh[i].first[b], static_cast<char>(i & 0xff)) << i;
    r->free(fresh[i].first);
  }
  EXPECT_TRUE(r->check().ok()) << r->check();
}

INSTANTIATE_TEST_SUITE_P(Disciplines, DebugMethodTest, ::testing::Values(Discipline::kShm, Discipline::kFile),
                         testing::discipline_test_name);

}  // namespace
}  // namespace memd
