// Region::alloc_batch and free_batch: a batch in a shared region is what
// the same single calls give, under every method; objects of one process's
// batch are freed by another's; a pool refuses a size not its own. And
// Region::alloc_near: a hint's free neighbour is the object given.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <vector>

#include "region/region.h"
#include "region_test_util.h"

namespace memd {
namespace {

using testing::Events;
using testing::region_name;
using testing::small_options;
using testing::TempDir;

constexpr size_t kBatch = 2000;

struct Posted {
  std::atomic<uint64_t> off[kBatch];
  std::atomic<int> done{0};
};

class RegionBatchTest : public ::testing::TestWithParam<Discipline> {
 protected:
  void TearDown() override { (void)Region::remove(name_, GetParam()); }
  std::unique_ptr<Region> make(Method m) {
    name_ = region_name(GetParam(), dir_, "batch");
    return make_method_region(name_, GetParam(), m, &events_);
  }
  static void ExpectDisjoint(Region& r, const std::vector<void*>& v, size_t size) {
    std::set<const void*> seen;
    for (size_t i = 0; i < v.size(); ++i) {
      ASSERT_NE(v[i], nullptr) << i;
      ASSERT_TRUE(seen.insert(v[i]).second) << i;
      ASSERT_GE(r.size(v[i]), size) << i;
      std::memset(v[i], static_cast<int>(i & 0xff), size);
    }
    for (size_t i = 0; i < v.size(); ++i) {
      ASSERT_EQ(static_cast<unsigned char*>(v[i])[size - 1], static_cast<unsigned char>(i & 0xff)) << i;
    }
  }
  TempDir dir_;
  std::string name_;
  Events events_;
};

TEST_P(RegionBatchTest, EveryMethodGivesABatchOfDistinctObjects) {
  for (Method m : {Method::kBest, Method::kPool, Method::kDebug, Method::kProfile}) {
    auto r = make(m);
    ASSERT_NE(r, nullptr);
    std::vector<void*> v(kBatch, nullptr);
    ASSERT_EQ(r->alloc_batch(v.size(), 56, v.data()), v.size()) << static_cast<int>(m);
    ExpectDisjoint(*r, v, 56);
    if (m != Method::kBest) {
      EXPECT_EQ(r->method_stats().live_objects, kBatch) << static_cast<int>(m);
    }
    r->free_batch(v.data(), v.size());
    if (m != Method::kBest) {
      EXPECT_EQ(r->method_stats().live_objects, 0u) << static_cast<int>(m);
    }
    EXPECT_EQ(events_.bad.load(), 0);
    EXPECT_TRUE(r->check().ok()) << r->check();
    r.reset();
    ASSERT_TRUE(Region::remove(name_, GetParam()).ok());
  }
}

TEST_P(RegionBatchTest, APoolRefusesABatchOfAnotherSize) {
  auto r = make(Method::kPool);
  ASSERT_NE(r, nullptr);
  void* first = r->alloc(64);  // fixes the pool's size
  ASSERT_NE(first, nullptr);
  void* out[8] = {};
  errno = 0;
  EXPECT_EQ(r->alloc_batch(8, 100, out), 0u);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(r->alloc_batch(8, 64, out), 8u);
  r->free_batch(out, 8);
  r->free(first);
}

TEST_P(RegionBatchTest, AnotherProcessFreesABatch) {
  auto r = make(Method::kBest);
  ASSERT_NE(r, nullptr);
  auto* posted = r->find_or_construct<Posted>("posted");
  ASSERT_NE(posted, nullptr);
  std::string sock = dir_.file("owner.sock");
  ASSERT_TRUE(r->serve(sock).ok());
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    auto a = Region::attach(name_, GetParam(), sock);
    if (!a.ok()) _exit(10);
    auto* box = (*a)->find<Posted>("posted");
    std::vector<void*> v(kBatch);
    if (box == nullptr || (*a)->alloc_batch(kBatch, 200, v.data()) != kBatch) _exit(11);
    for (size_t i = 0; i < kBatch; ++i) {
      std::memset(v[i], 'c', 200);
      box->off[i] = (*a)->offset_of(v[i]);
    }
    box->done = 1;
    a->reset();  // a client's objects stay
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ASSERT_EQ(posted->done.load(), 1);
  std::vector<void*> v(kBatch);
  for (size_t i = 0; i < kBatch; ++i) {
    v[i] = r->at(posted->off[i]);
    ASSERT_EQ(static_cast<char*>(v[i])[199], 'c') << i;
  }
  r->free_batch(v.data(), v.size());
  EXPECT_EQ(events_.bad.load(), 0);
  // Freed once: a second batch of the same pointers is all double frees.
  ::testing::internal::CaptureStderr();
  r->free_batch(v.data(), 10);
  (void)::testing::internal::GetCapturedStderr();
  EXPECT_EQ(events_.bad.load(), 10);
  EXPECT_TRUE(r->check().ok()) << r->check();
}

// Two sites of one size, so that each chain gets a pool. (Their bodies
// differ: identical functions may be folded into one, one site.)
__attribute__((noinline)) void* pooled_site(Region& r) {
  void* p = r.alloc(40);
  asm volatile("# pooled_site" ::"r"(p) : "memory");
  return p;
}
__attribute__((noinline)) void* other_site(Region& r) {
  void* p = r.alloc(40);
  asm volatile("# other_site" ::"r"(p) : "memory");
  return p;
}

TEST_P(RegionBatchTest, APooledChainsObjectsLieApartAndAnotherProcessFreesThem) {
  auto r = make(Method::kBest);
  ASSERT_NE(r, nullptr);
  r->set_chain_pools(true);
  auto* posted = r->find_or_construct<Posted>("posted");
  ASSERT_NE(posted, nullptr);
  // Both sites' chains get pools after their first allocations; past
  // those, each site's objects follow one another, interleaved as the calls
  // are.
  std::vector<char*> mine, others;
  for (size_t i = 0; i < kBatch; ++i) {
    mine.push_back(static_cast<char*>(pooled_site(*r)));
    others.push_back(static_cast<char*>(other_site(*r)));
    ASSERT_NE(mine.back(), nullptr);
    std::memset(mine.back(), 'p', 40);
    std::memset(others.back(), 'o', 40);
  }
  size_t adjacent = 0;
  for (size_t i = 1; i < kBatch; ++i) adjacent += mine[i] - mine[i - 1] == 48;  // 40 bytes: the 48-byte class
  EXPECT_GT(adjacent, kBatch * 8 / 10);
  for (size_t i = 0; i < kBatch; ++i) posted->off[i] = r->offset_of(mine[i]);
  std::string sock = dir_.file("owner.sock");
  ASSERT_TRUE(r->serve(sock).ok());
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    // Another process frees the pooled objects: remote frees into the
    // pool's blocks of the owner's heap.
    auto a = Region::attach(name_, GetParam(), sock);
    if (!a.ok()) _exit(10);
    auto* box = (*a)->find<Posted>("posted");
    if (box == nullptr) _exit(11);
    for (size_t i = 0; i < kBatch; ++i) {
      char* p = static_cast<char*>((*a)->at(box->off[i]));
      if (p[39] != 'p') _exit(12);
      (*a)->free(p);
    }
    box->done = 1;
    a->reset();
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(events_.bad.load(), 0);
  for (char* p : others) ASSERT_EQ(p[39], 'o');
  // The pool takes its blocks' objects back and serves the site again.
  std::set<char*> freed(mine.begin(), mine.end());
  size_t reused = 0;
  for (size_t i = 0; i < kBatch; ++i) reused += freed.count(static_cast<char*>(pooled_site(*r)));
  EXPECT_GT(reused, kBatch / 2);
  for (char* p : others) r->free(p);
  EXPECT_TRUE(r->check().ok()) << r->check();
}

TEST_P(RegionBatchTest, AHintsFreeNeighbourIsTheObjectGiven) {
  auto r = make(Method::kBest);
  ASSERT_NE(r, nullptr);
  std::vector<char*> v;
  for (int i = 0; i < 256; ++i) v.push_back(static_cast<char*>(r->alloc(64)));
  size_t k = 1;
  while (k + 20 < v.size() && !(v[k] - v[k - 1] == 64 && v[k + 20] - v[k] == 20 * 64 &&
                                reinterpret_cast<uintptr_t>(v[k - 1]) >> 12 == reinterpret_cast<uintptr_t>(v[k + 20]) >> 12)) {
    ++k;
  }
  ASSERT_LT(k + 20, v.size());
  char* neighbour = v[k - 1];
  r->free(neighbour);
  r->free(v[k + 20]);  // first on the block's free list
  char* p = static_cast<char*>(r->alloc_near(64, v[k], 64));
  EXPECT_EQ(p, neighbour);
  v[k - 1] = p;
  v[k + 20] = static_cast<char*>(r->alloc_near(64, nullptr, 64));
  ASSERT_NE(v[k + 20], nullptr);
  for (char* q : v) r->free(q);
  EXPECT_EQ(events_.bad.load(), 0);
  EXPECT_TRUE(r->check().ok()) << r->check();
}

INSTANTIATE_TEST_SUITE_P(Disciplines, RegionBatchTest, ::testing::Values(Discipline::kShm, Discipline::kFile),
                         testing::discipline_test_name);

}  // namespace
}  // namespace memd
