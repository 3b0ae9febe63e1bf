// The pool and last methods of a region (Vmalloc's Vmpool and Vmlast): their
// semantics in one process, with threads, across real processes that attach
// through the owner's socket (one of them killed at a random instant), and
// across a close and reopen of a file region. Bad frees are reported, never
// obeyed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "client/memd_region.h"
#include "heap/crash_point.h"
#include "heap/pool_method.h"
#include "region/region.h"
#include "region_test_util.h"

namespace memd {
namespace {

using testing::region_name;
using testing::small_options;
using testing::Events;
using testing::TempDir;


class MethodTest : public ::testing::TestWithParam<Discipline> {
 protected:
  void TearDown() override { (void)Region::remove(name_, GetParam()); }
  std::unique_ptr<Region> make(Method m, size_t bytes = size_t{64} << 20) {
    name_ = region_name(GetParam(), dir_, "method");
    return make_method_region(name_, GetParam(), m, &events_, bytes);
  }
  // A region of method `m` served on a socket, with a root `Posts` in it.
  template <class Posts>
  Posts* serve_with(std::unique_ptr<Region>& r, Method m, std::string* sock) {
    r = make(m, size_t{256} << 20);
    if (r == nullptr) return nullptr;
    *sock = dir_.file("owner.sock");
    if (!r->serve(*sock).ok()) return nullptr;
    return r->find_or_construct<Posts>("posts");
  }
  TempDir dir_;
  std::string name_;
  Events events_;
};

// --- pool ---

TEST_P(MethodTest, PoolFixesItsSizeAtTheFirstAllocationAndRefusesOthers) {
  auto r = make(Method::kPool);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->method(), Method::kPool);
  EXPECT_EQ(r->method_stats().object_size, 0u);
  void* a = r->alloc(40);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 16, 0u);
  EXPECT_EQ(r->method_stats().object_size, 40u);
  errno = 0;
  EXPECT_EQ(r->alloc(41), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(r->alloc(0), nullptr);
  EXPECT_EQ(r->size(a), 48u);  // the stride: 40 rounded to 16
  EXPECT_EQ(r->resize(a, 48), a);
  EXPECT_EQ(r->resize(a, 49), nullptr);
  r->free(a);
  EXPECT_EQ(r->size(a), 0u);
  EXPECT_EQ(events_.bad.load(), 0);
}

TEST_P(MethodTest, PoolObjectsAreDistinctAndReusedAfterFree) {
  auto r = make(Method::kPool);
  ASSERT_NE(r, nullptr);
  constexpr int kN = 20000;  // several chunks
  std::vector<char*> objs;
  std::set<char*> seen;
  for (int i = 0; i < kN; ++i) {
    auto* p = static_cast<char*>(r->alloc(24));
    ASSERT_NE(p, nullptr) << i;
    ASSERT_TRUE(seen.insert(p).second) << "handed out twice: " << static_cast<void*>(p);
    std::memset(p, i & 0xff, 24);
    objs.push_back(p);
  }
  MethodStats s = r->method_stats();
  EXPECT_EQ(s.live_objects, static_cast<uint64_t>(kN));
  EXPECT_GE(s.capacity, static_cast<uint64_t>(kN));
  EXPECT_GT(s.chunks, 1u);
  for (int i = 0; i < kN; ++i) {
    for (int b = 0; b < 24; ++b) ASSERT_EQ(static_cast<unsigned char>(objs[i][b]), i & 0xff);
  }
  // Free every other object: the pool fills every free slot (the freed ones
  // and those never used) before it takes another chunk.
  for (int i = 0; i < kN; i += 2) r->free(objs[i]);
  EXPECT_EQ(r->method_stats().live_objects, static_cast<uint64_t>(kN / 2));
  uint64_t chunks = r->method_stats().chunks;
  std::set<char*> live;
  for (int i = 1; i < kN; i += 2) live.insert(objs[i]);
  uint64_t room = s.capacity - kN / 2;
  std::set<char*> freed;
  for (int i = 0; i < kN; i += 2) freed.insert(objs[i]);
  for (uint64_t i = 0; i < room; ++i) {
    auto* p = static_cast<char*>(r->alloc(24));
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(live.count(p), 0u) << "a live object handed out again";
    ASSERT_TRUE(live.insert(p).second);
    freed.erase(p);
  }
  EXPECT_TRUE(freed.empty()) << freed.size() << " freed slots were not reused";
  EXPECT_EQ(r->method_stats().chunks, chunks);
  ASSERT_NE(r->alloc(24), nullptr);
  EXPECT_EQ(r->method_stats().chunks, chunks + 1);
  EXPECT_TRUE(r->check().ok()) << r->check();
}

TEST_P(MethodTest, PoolReportsDoubleFreesAndPointersThatAreNotItsObjects) {
  auto r = make(Method::kPool);
  ASSERT_NE(r, nullptr);
  auto* a = static_cast<char*>(r->alloc(64));
  auto* b = static_cast<char*>(r->alloc(64));
  ASSERT_NE(a, nullptr);
  r->free(a);
  r->free(a);  // double
  EXPECT_EQ(events_.bad.load(), 1);
  r->free(b + 8);  // inside an object
  EXPECT_EQ(events_.bad.load(), 2);
  int local = 0;
  r->free(&local);  // outside the region
  EXPECT_EQ(events_.bad.load(), 3);
  EXPECT_EQ(r->method_stats().live_objects, 1u) << "b is still live";
  EXPECT_EQ(r->size(b), 64u);
}

TEST_P(MethodTest, PoolClearFreesEverythingAndTheNextAllocationPicksANewSize) {
  auto r = make(Method::kPool);
  ASSERT_NE(r, nullptr);
  for (int i = 0; i < 5000; ++i) ASSERT_NE(r->alloc(100), nullptr);
  size_t huge = r->stat().huge_objects;
  uint64_t chunks = r->method_stats().chunks;
  EXPECT_EQ(chunks, 5u) << "1,165 objects of 112 bytes in each 128 KiB chunk";
  ASSERT_TRUE(r->clear().ok());
  MethodStats s = r->method_stats();
  EXPECT_EQ(s.object_size, 0u);
  EXPECT_EQ(s.chunks, 0u);
  r->compact();  // the thread heap may keep a freed run for reuse until then
  EXPECT_EQ(r->stat().huge_objects, huge - chunks) << "every chunk went back (" << huge << " before)";
  void* p = r->alloc(512);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(r->method_stats().object_size, 512u);
  EXPECT_TRUE(r->check().ok()) << r->check();
}

TEST_P(MethodTest, PoolThreadsNeverShareAnObject) {
  auto r = make(Method::kPool, size_t{256} << 20);
  ASSERT_NE(r, nullptr);
  ASSERT_NE(r->alloc(32), nullptr);  // fix the size
  constexpr int kThreads = 4, kRounds = 20000;
  std::atomic<int> failures{0};
  auto work = [&](int id) {
    std::mt19937 rng(id);
    std::vector<uint32_t*> mine;
    for (int i = 0; i < kRounds; ++i) {
      if (mine.size() < 200 && (mine.empty() || rng() % 3 != 0)) {
        auto* p = static_cast<uint32_t*>(r->alloc(32));
        if (p == nullptr) {
          failures.fetch_add(1);
          return;
        }
        for (int w = 0; w < 8; ++w) p[w] = static_cast<uint32_t>(id << 24 | i);
        mine.push_back(p);
      } else {
        size_t k = rng() % mine.size();
        uint32_t* p = mine[k];
        for (int w = 1; w < 8; ++w) {
          if (p[w] != p[0] || p[0] >> 24 != static_cast<uint32_t>(id)) failures.fetch_add(1);
        }
        r->free(p);
        mine[k] = mine.back();
        mine.pop_back();
      }
    }
    for (uint32_t* p : mine) r->free(p);
  };
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; ++i) ts.emplace_back(work, i);
  for (auto& t : ts) t.join();
  EXPECT_EQ(failures.load(), 0) << "an object was overwritten by another thread";
  EXPECT_EQ(r->method_stats().live_objects, 1u);
  EXPECT_EQ(events_.bad.load(), 0);
}

TEST_P(MethodTest, PoolClearMakesTheCachesOfOtherThreadsStale) {
  auto r = make(Method::kPool);
  ASSERT_NE(r, nullptr);
  std::atomic<int> step{0};
  std::vector<void*> mine_after;
  std::thread t([&] {
    std::vector<void*> held;
    for (int i = 0; i < 10; ++i) held.push_back(r->alloc(32));
    for (void* p : held) r->free(p);  // now in this thread's cache
    step.store(1);
    while (step.load() != 2) std::this_thread::yield();
    for (int i = 0; i < 200; ++i) mine_after.push_back(r->alloc(32));
  });
  while (step.load() != 1) std::this_thread::yield();
  ASSERT_TRUE(r->clear().ok());
  std::set<void*> main_objects;
  for (int i = 0; i < 200; ++i) main_objects.insert(r->alloc(32));
  step.store(2);
  t.join();
  for (void* p : mine_after) {
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(main_objects.count(p), 0u) << "an object of the cleared pool was handed out again";
  }
  EXPECT_EQ(r->method_stats().live_objects, 400u);
  EXPECT_EQ(events_.bad.load(), 0);
}

// --- last ---

TEST_P(MethodTest, LastAllocatesInOrderAndFreesOnlyTheMostRecentObject) {
  auto r = make(Method::kLast);
  ASSERT_NE(r, nullptr);
  auto* a = static_cast<char*>(r->alloc(100));
  auto* b = static_cast<char*>(r->alloc(30));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b - a, 112) << "bump allocation, 16-byte steps";
  EXPECT_EQ(r->size(b), 32u);
  EXPECT_EQ(r->size(a), 0u) << "the method keeps no sizes but the last one's";
  r->free(b);
  auto* c = static_cast<char*>(r->alloc(16));
  EXPECT_EQ(c, b) << "the freed last object's space is reused";
  r->free(a);  // not the last: left for clear
  EXPECT_EQ(r->method_stats().ignored_frees, 1u);
  EXPECT_EQ(events_.bad.load(), 0);
  int local = 0;
  r->free(&local);
  EXPECT_EQ(events_.bad.load(), 1);
}

TEST_P(MethodTest, LastResizesTheMostRecentObjectInPlaceAndMovesOthers) {
  auto r = make(Method::kLast);
  ASSERT_NE(r, nullptr);
  auto* a = static_cast<char*>(r->alloc(64));
  std::memset(a, 'a', 64);
  auto* b = static_cast<char*>(r->alloc(64));
  std::memset(b, 'b', 64);
  EXPECT_EQ(r->resize(b, 4096), b) << "the last object grows in place";
  EXPECT_EQ(r->size(b), 4096u);
  EXPECT_EQ(r->resize(b, 16), b);
  auto* a2 = static_cast<char*>(r->resize(a, 200));
  ASSERT_NE(a2, nullptr);
  EXPECT_NE(a2, a);
  for (int i = 0; i < 64; ++i) ASSERT_EQ(a2[i], 'a');
  // Bigger than a chunk: its own chunk.
  auto* big = static_cast<char*>(r->alloc(size_t{1} << 20));
  ASSERT_NE(big, nullptr);
  std::memset(big, 1, size_t{1} << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r->alloc_aligned(10, 256)) % 256, 0u);
}

TEST_P(MethodTest, LastClearGivesEveryChunkBack) {
  auto r = make(Method::kLast);
  ASSERT_NE(r, nullptr);
  for (int i = 0; i < 50000; ++i) ASSERT_NE(r->alloc(1 + i % 200), nullptr);
  MethodStats s = r->method_stats();
  EXPECT_GT(s.chunks, 10u);
  size_t huge = r->stat().huge_objects;
  ASSERT_TRUE(r->clear().ok());
  EXPECT_EQ(r->method_stats().chunks, 0u);
  r->compact();  // the thread heap may keep a freed run for reuse until then
  EXPECT_EQ(r->stat().huge_objects, huge - s.chunks);
  ASSERT_NE(r->alloc(10), nullptr);
  EXPECT_TRUE(r->check().ok()) << r->check();
}

TEST_P(MethodTest, LastThreadsGetDisjointObjects) {
  auto r = make(Method::kLast, size_t{256} << 20);
  ASSERT_NE(r, nullptr);
  constexpr int kThreads = 4, kEach = 20000;
  std::vector<std::vector<std::pair<char*, size_t>>> got(kThreads);
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        size_t n = 1 + (i * 7 + t) % 300;
        auto* p = static_cast<char*>(r->alloc(n));
        if (p == nullptr) return;
        std::memset(p, t, n);
        got[t].push_back({p, n});
      }
    });
  }
  for (auto& t : ts) t.join();
  std::vector<std::pair<char*, size_t>> all;
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(got[t].size(), static_cast<size_t>(kEach));
    for (auto [p, n] : got[t]) {
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(p[i], t) << "overwritten by another thread";
      all.push_back({p, n});
    }
  }
  std::sort(all.begin(), all.end());
  for (size_t i = 1; i < all.size(); ++i) ASSERT_LE(all[i - 1].first + all[i - 1].second, all[i].first);
}

// --- both ---

TEST_P(MethodTest, RootsAreTheBestHeapsInARegionOfAnyMethod) {
  auto r = make(Method::kPool);
  ASSERT_NE(r, nullptr);
  ASSERT_NE(r->alloc(16), nullptr);
  struct Table {
    uint64_t v[100];
  };
  Table* t = r->find_or_construct<Table>("table");  // 800 bytes: not the pool's size
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(r->find<Table>("table"), t);
  std::vector<RootInfo> roots = r->list();
  ASSERT_EQ(roots.size(), 1u) << "the method's own state is not listed";
  EXPECT_EQ(roots[0].name, "table");
  EXPECT_EQ(r->find<uint64_t>("memd:pool"), nullptr);
  EXPECT_EQ(errno, EINVAL) << "memd:... names are reserved";
  EXPECT_TRUE(r->destroy<Table>("table"));
  EXPECT_EQ(events_.bad.load(), 0);
  EXPECT_EQ(r->method_stats().live_objects, 1u);
}

TEST_P(MethodTest, ClearOfABestRegionIsRefused) {
  auto r = make(Method::kBest);
  ASSERT_NE(r, nullptr);
  absl::Status s = r->clear();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("best"), std::string_view::npos) << s;
}

TEST_P(MethodTest, OpeningWithAnotherMethodIsRefusedNamingBoth) {
  auto r = make(Method::kLast);
  ASSERT_NE(r, nullptr);
  r.reset();
  auto wrong = Region::open(name_, GetParam(), Method::kPool);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(wrong.status().message().find("managed by method last, asked for method pool"), std::string_view::npos)
      << wrong.status();
  auto any = Region::open(name_, GetParam());
  ASSERT_TRUE(any.ok()) << any.status();
  EXPECT_EQ((*any)->method(), Method::kLast);
}

TEST_P(MethodTest, PoolObjectsOfAFileRegionSurviveCloseAndReopen) {
  if (GetParam() == Discipline::kShm) GTEST_SKIP() << "shm regions are not kept across opens here";
  auto r = make(Method::kPool);
  ASSERT_NE(r, nullptr);
  std::vector<uint64_t> offs;
  for (uint32_t i = 0; i < 3000; ++i) {
    auto* p = static_cast<uint32_t*>(r->alloc(20));
    ASSERT_NE(p, nullptr);
    p[0] = i;
    p[4] = ~i;
    offs.push_back(r->offset_of(p));
  }
  r.reset();
  auto again = Region::open(name_, GetParam(), Method::kPool);
  ASSERT_TRUE(again.ok()) << again.status();
  r = std::move(*again);
  r->set_event_handler(Events::on, &events_);
  MethodStats s = r->method_stats();
  EXPECT_EQ(s.object_size, 20u);
  EXPECT_EQ(s.live_objects, 3000u);
  std::set<uint64_t> live(offs.begin(), offs.end());
  for (uint32_t i = 0; i < 3000; ++i) {
    auto* p = static_cast<uint32_t*>(r->at(offs[i]));
    ASSERT_EQ(p[0], i);
    ASSERT_EQ(p[4], ~i);
  }
  for (int i = 0; i < 1000; ++i) {
    void* p = r->alloc(20);
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(live.count(r->offset_of(p)), 0u) << "a live object was handed out again";
  }
  for (uint64_t off : offs) r->free(r->at(off));
  EXPECT_EQ(r->method_stats().live_objects, 1000u);
  EXPECT_EQ(events_.bad.load(), 0);
  EXPECT_TRUE(r->check().ok()) << r->check();
}

// Children attach through the owner's socket, allocate from the pool and
// post what they got; the owner checks that no object went to two
// processes and frees all of them. One child is killed at a random instant
// in a loop of allocations and frees; the pool stays usable and exact.
struct Posts {
  static constexpr int kPerChild = 3000;
  std::atomic<uint64_t> slot[4][kPerChild];
};

TEST_P(MethodTest, ProcessesShareAPoolAndOneKilledLeavesItUsable) {
  std::unique_ptr<Region> r;
  std::string sock;
  Posts* posts = serve_with<Posts>(r, Method::kPool, &sock);
  ASSERT_NE(posts, nullptr);
  ASSERT_NE(r->alloc(48), nullptr);
  std::vector<pid_t> kids;
  for (int c = 0; c < 4; ++c) {
    pid_t pid = fork();
    if (pid == 0) {
      auto a = Region::attach(name_, GetParam(), sock);
      if (!a.ok()) _exit(10);
      Posts* box = (*a)->find<Posts>("posts");
      if (box == nullptr) _exit(11);
      for (int i = 0; i < Posts::kPerChild; ++i) {
        auto* p = static_cast<uint64_t*>((*a)->alloc(48));
        if (p == nullptr) _exit(12);
        for (int w = 0; w < 6; ++w) p[w] = static_cast<uint64_t>(c) << 32 | i;
        box->slot[c][i].store((*a)->offset_of(p) + 1);
      }
      if (c == 3) {  // the one to be killed: churns until it is
        std::vector<void*> mine;
        std::mt19937 rng(getpid());
        for (;;) {
          if (mine.size() < 100 && rng() % 2) mine.push_back((*a)->alloc(48));
          else if (!mine.empty()) {
            (*a)->free(mine.back());
            mine.pop_back();
          }
        }
      }
      a->reset();  // a clean close gives this thread's cached objects back
      _exit(0);
    }
    kids.push_back(pid);
  }
  for (int c = 0; c < 3; ++c) {
    int status = 0;
    ASSERT_EQ(waitpid(kids[c], &status, 0), kids[c]);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  while (posts->slot[3][Posts::kPerChild - 1].load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(std::random_device{}() % 50));
  kill(kids[3], SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(kids[3], &status, 0), kids[3]);

  std::set<uint64_t> offs;
  for (int c = 0; c < 4; ++c) {
    for (int i = 0; i < Posts::kPerChild; ++i) {
      uint64_t off = posts->slot[c][i].load() - 1;
      ASSERT_TRUE(offs.insert(off).second) << "one object went to two processes";
      auto* p = static_cast<uint64_t*>(r->at(off));
      for (int w = 0; w < 6; ++w) ASSERT_EQ(p[w], static_cast<uint64_t>(c) << 32 | i);
    }
  }
  // What the killed child held at its death stays taken: its 100 churned
  // objects at most, and one in flight between the pool and its list (its
  // cache, and a word it may have been claiming at that instant, go back
  // when its lease is reclaimed); nothing else is lost or doubled.
  EXPECT_TRUE(testing::eventually([&] { return r->method_stats().live_objects <= 1u + offs.size() + 100 + 1; }))
      << r->method_stats().live_objects << " live, " << offs.size() << " posted";
  EXPECT_GE(r->method_stats().live_objects, 1u + offs.size());
  for (uint64_t off : offs) r->free(r->at(off));
  EXPECT_EQ(events_.bad.load(), 0);
  for (int i = 0; i < 5000; ++i) {
    void* p = r->alloc(48);
    ASSERT_NE(p, nullptr);
    std::memset(p, 0, 48);
  }
  EXPECT_TRUE(r->check().ok()) << r->check();
}

// A process killed while its threads hold pool objects in their caches
// (each thread: the rest of a claimed bitmap word, and objects it freed):
// those go back to the pool when its lease is reclaimed -- by the owner
// serving it (`served`), or by the recovery of the next owner when the
// killed process owned the region itself. Live afterwards: exactly what the
// dead process published and did not free.
struct CachePosts {
  static constexpr int kThreads = 4, kPerThread = 10;
  std::atomic<uint64_t> slot[kThreads][kPerThread];
  std::atomic<int> ready;
};

// In the child: each thread allocates kPerThread objects (claiming a word
// whose rest stays cached), publishes them, then frees and unpublishes half
// (into its cache); then the child says so on `ready_fd` and waits to be
// killed.
[[noreturn]] void hold_pool_caches(Region& r, int ready_fd) {
  auto* posts = r.find<CachePosts>("posts");
  if (posts == nullptr) _exit(11);
  std::vector<std::thread> threads;
  for (int t = 0; t < CachePosts::kThreads; ++t) {
    threads.emplace_back([&r, posts, t] {
      for (int i = 0; i < CachePosts::kPerThread; ++i) {
        void* p = r.alloc(48);
        if (p == nullptr) _exit(12);
        posts->slot[t][i].store(r.offset_of(p) + 1);
      }
      for (int i = 0; i < CachePosts::kPerThread; i += 2) r.free(r.at(posts->slot[t][i].exchange(0) - 1));
      posts->ready.fetch_add(1);
      for (;;) pause();  // the thread, and its cache, live on until the kill
    });
  }
  while (posts->ready.load() != CachePosts::kThreads) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  char c = 1;
  if (write(ready_fd, &c, 1) != 1) _exit(13);
  for (;;) pause();
}

// The holder runs as a fresh process (this binary again: a fork of the
// serving owner, which has threads, may not start threads under
// ThreadSanitizer). It attaches through the owner's socket, or opens the
// region as its owner when there is no socket, and says on a pipe when its
// threads hold their caches. Returns its pid, or -1 if it never got ready.
const char* kHolderEnv = "MEMD_POOL_CACHE_HOLDER";

TEST(PoolCacheHolderChild, Run) {
  const char* args = getenv(kHolderEnv);
  if (args == nullptr) GTEST_SKIP() << "runs only as the child of the pool cache tests";
  std::vector<std::string> f = testing::split_fields(args);  // name|socket|discipline|ready fd
  if (f.size() != 4) _exit(9);
  const std::string& name = f[0];
  const std::string& sock = f[1];
  auto d = static_cast<Discipline>(std::atoi(f[2].c_str()));
  int ready_fd = std::atoi(f[3].c_str());
  auto r = sock.empty() ? Region::open(name, d, Method::kPool) : Region::attach(name, d, sock);
  if (!r.ok()) _exit(10);
  hold_pool_caches(**r, ready_fd);
}

uint64_t published(const CachePosts* posts) {
  uint64_t n = 0;
  for (const auto& t : posts->slot) {
    for (const auto& s : t) n += s.load() != 0;
  }
  return n;
}

// Kills and reaps a child when a test leaves early, unless pid was reset.
struct KilledAtExit {
  pid_t pid;
  ~KilledAtExit() {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
};

pid_t start_holder(const std::string& name, Discipline d, const std::string& sock) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t pid = testing::spawn_self("PoolCacheHolderChild.*", {std::string(kHolderEnv) + "=" + name + "|" + sock + "|" +
                                                                 std::to_string(static_cast<int>(d)) + "|" +
                                                                 std::to_string(fds[1])});
  close(fds[1]);
  char c = 0;
  bool ready = pid > 0 && read(fds[0], &c, 1) == 1;
  close(fds[0]);
  if (!ready && pid > 0) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  return ready ? pid : -1;
}

TEST_P(MethodTest, AKilledClientsCachedPoolObjectsGoBackWhenItsLeaseIsReclaimed) {
  std::unique_ptr<Region> r;
  std::string sock;
  CachePosts* posts = serve_with<CachePosts>(r, Method::kPool, &sock);
  ASSERT_NE(posts, nullptr);
  ASSERT_NE(r->alloc(48), nullptr);  // the owner's one object
  pid_t pid = start_holder(name_, GetParam(), sock);
  ASSERT_GT(pid, 0) << "the child did not get ready";
  KilledAtExit holder{pid};  // a failed assertion must not leave it running
  uint64_t kept = published(posts);
  ASSERT_EQ(kept, uint64_t{CachePosts::kThreads * CachePosts::kPerThread / 2});
  // Before the kill, each thread's cache holds what it freed and the rest of
  // its word (none of it live, all of it taken in the bitmap). The rest may
  // be short: a thread's first word may be its chunk's last, partly filled.
  ASSERT_GE(r->method_stats().live_objects, 1 + kept + CachePosts::kThreads * (CachePosts::kPerThread / 2));
  kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  holder.pid = -1;
  EXPECT_TRUE(testing::eventually([&] { return r->method_stats().live_objects == 1 + kept; }))
      << "live: " << r->method_stats().live_objects << ", published: " << kept << " and the owner's one";
  EXPECT_EQ(events_.bad.load(), 0);
  EXPECT_TRUE(r->check().ok()) << r->check();
}

// A client killed in the middle of a claim, after it took a bitmap word's
// free bits and before its record said so (the crash point between the
// two): the bits go back when its lease is reclaimed, with the claim lock
// it held, and the chunk is claimed from again. Live afterwards: exactly
// what the dead process allocated.
const char* kClaimCrashEnv = "MEMD_POOL_CLAIM_CRASH";

TEST(PoolClaimCrashChild, Run) {
  const char* args = getenv(kClaimCrashEnv);
  if (args == nullptr) GTEST_SKIP() << "runs only as the child of the claim crash test";
  std::vector<std::string> f = testing::split_fields(args);  // name|socket|discipline
  if (f.size() != 3) _exit(9);
  auto r = Region::attach(f[0], static_cast<Discipline>(std::atoi(f[2].c_str())), f[1]);
  if (!r.ok()) _exit(10);
  auto* posts = (*r)->find<Posts>("posts");
  if (posts == nullptr) _exit(11);
  for (int i = 0; i < Posts::kPerChild; ++i) {  // dies at a claim on the way
    void* p = (*r)->alloc(48);
    if (p == nullptr) _exit(12);
    posts->slot[0][i].store((*r)->offset_of(p) + 1);
  }
  _exit(13);
}

TEST_P(MethodTest, AClientKilledBetweenTakingAWordAndRecordingItLeaksNothing) {
  std::unique_ptr<Region> r;
  std::string sock;
  Posts* posts = serve_with<Posts>(r, Method::kPool, &sock);
  ASSERT_NE(posts, nullptr);
  ASSERT_NE(r->alloc(48), nullptr);  // the owner's one object
  // The third claim: two words handed out whole, the third taken and not
  // yet recorded.
  pid_t pid = testing::spawn_self("PoolClaimCrashChild.*",
                                  {std::string(kClaimCrashEnv) + "=" + name_ + "|" + sock + "|" +
                                       std::to_string(static_cast<int>(GetParam())),
                                   "MEMD_CRASH_AT=pool_claim_taken:3"});
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == heap::kCrashExitCode) << status;
  uint64_t published = 0;
  while (published < Posts::kPerChild && posts->slot[0][published].load() != 0) ++published;
  ASSERT_GE(published, 2u);  // at least one object of each of its two whole words
  EXPECT_TRUE(testing::eventually([&] { return r->method_stats().live_objects == 1 + published; }))
      << "live: " << r->method_stats().live_objects << ", published: " << published << " and the owner's one";
  // The chunk it was claiming in is not locked for good: the objects it
  // had taken are handed out again, to the owner now.
  std::set<uint64_t> offs;
  for (uint64_t i = 0; i < published; ++i) offs.insert(posts->slot[0][i].load() - 1);
  for (int i = 0; i < 3 * 64; ++i) {
    void* p = r->alloc(48);
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(offs.count(r->offset_of(p)), 0u) << "an object the dead client published was handed out again";
    std::memset(p, 0, 48);
  }
  EXPECT_EQ(events_.bad.load(), 0);
  EXPECT_TRUE(r->check().ok()) << r->check();
}

TEST_P(MethodTest, AKilledOwnersCachedPoolObjectsGoBackAtTheNextOpen) {
  if (GetParam() == Discipline::kShm) GTEST_SKIP() << "shm regions are not kept across opens here";
  {
    auto r = make(Method::kPool);
    ASSERT_NE(r, nullptr);
    ASSERT_NE(r->find_or_construct<CachePosts>("posts"), nullptr);
  }
  pid_t pid = start_holder(name_, GetParam(), "");
  ASSERT_GT(pid, 0) << "the child did not get ready";
  kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  auto again = Region::open(name_, GetParam(), Method::kPool);
  ASSERT_TRUE(again.ok()) << again.status();
  auto* posts = (*again)->find<CachePosts>("posts");
  ASSERT_NE(posts, nullptr);
  ASSERT_EQ(published(posts), uint64_t{CachePosts::kThreads * CachePosts::kPerThread / 2});
  EXPECT_EQ((*again)->method_stats().live_objects, published(posts));
  EXPECT_TRUE((*again)->check().ok()) << (*again)->check();
}

TEST_P(MethodTest, ProcessesBumpOneLastRegionWithoutOverlap) {
  std::unique_ptr<Region> r;
  std::string sock;
  Posts* posts = serve_with<Posts>(r, Method::kLast, &sock);
  ASSERT_NE(posts, nullptr);
  std::vector<pid_t> kids;
  for (int c = 0; c < 4; ++c) {
    pid_t pid = fork();
    if (pid == 0) {
      auto a = Region::attach(name_, GetParam(), sock);
      if (!a.ok()) _exit(10);
      Posts* box = (*a)->find<Posts>("posts");
      for (int i = 0; i < Posts::kPerChild; ++i) {
        size_t n = 16 + (i % 13) * 16;
        auto* p = static_cast<uint64_t*>((*a)->alloc(n));
        if (p == nullptr) _exit(12);
        for (size_t w = 0; w < n / 8; ++w) p[w] = static_cast<uint64_t>(c) << 32 | i;
        box->slot[c][i].store((*a)->offset_of(p) + 1);
      }
      _exit(0);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (int c = 0; c < 4; ++c) {
    for (int i = 0; i < Posts::kPerChild; ++i) {
      uint64_t off = posts->slot[c][i].load() - 1;
      size_t n = 16 + (i % 13) * 16;
      auto* p = static_cast<uint64_t*>(r->at(off));
      for (size_t w = 0; w < n / 8; ++w) ASSERT_EQ(p[w], static_cast<uint64_t>(c) << 32 | i);
      spans.push_back({off, off + n});
    }
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) ASSERT_LE(spans[i - 1].second, spans[i].first);
  ASSERT_TRUE(r->clear().ok());
  EXPECT_EQ(r->method_stats().chunks, 0u);
  EXPECT_TRUE(r->check().ok()) << r->check();
}

TEST_P(MethodTest, TheCApiChoosesAndReportsTheMethod) {
  name_ = region_name(GetParam(), dir_, "cmethod");
  memd_region* r = memd_region_create_method(name_.c_str(), static_cast<int>(GetParam()), MEMD_LAST, 16 << 20);
  ASSERT_NE(r, nullptr) << std::strerror(errno);
  EXPECT_EQ(memd_region_method(r), MEMD_LAST);
  void* a = memd_region_alloc(r, 10);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(memd_region_size(r, a), 16u);
  EXPECT_EQ(memd_region_clear(r), 0);
  memd_region_close(r);
  errno = 0;
  EXPECT_EQ(memd_region_open_method(name_.c_str(), static_cast<int>(GetParam()), MEMD_POOL), nullptr);
  EXPECT_EQ(errno, EPROTO);
  EXPECT_EQ(memd_region_create_method(name_.c_str(), static_cast<int>(GetParam()), 9, 16 << 20), nullptr);
  EXPECT_EQ(errno, EINVAL);
  r = memd_region_open(name_.c_str(), static_cast<int>(GetParam()));
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(memd_region_method(r), MEMD_LAST);
  memd_region_close(r);
  std::string best = region_name(GetParam(), dir_, "cbest");
  r = memd_region_create(best.c_str(), static_cast<int>(GetParam()), 16 << 20);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(memd_region_clear(r), -1);
  EXPECT_EQ(errno, EPROTO);
  memd_region_close(r);
  EXPECT_EQ(memd_region_remove(best.c_str(), static_cast<int>(GetParam())), 0);
}

INSTANTIATE_TEST_SUITE_P(Disciplines, MethodTest, ::testing::Values(Discipline::kShm, Discipline::kFile),
                         testing::discipline_test_name);

}  // namespace
}  // namespace memd
