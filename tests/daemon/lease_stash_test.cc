// The client's stash of spare blocks, against the real daemon: a process
// churning objects through many mid-size classes keeps the spares it
// reuses (so it rarely calls the daemon), and gives back those it stopped
// using without being asked.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "tests/daemon/raw_session.h"
#include "tests/daemon/test_util.h"

namespace memd {
namespace {

using namespace memd::testing;

// Replaces a random live object by one of a random size, `pairs` times.
void churn(Region& r, std::vector<void*>& live, std::mt19937_64& rng, size_t min_size, size_t max_size, int pairs) {
  std::uniform_int_distribution<size_t> size(min_size, max_size);
  std::uniform_int_distribution<size_t> slot(0, live.size() - 1);
  for (int i = 0; i < pairs; ++i) {
    void*& p = live[slot(rng)];
    r.free(p);
    size_t n = size(rng);
    p = r.alloc(n);
    ASSERT_NE(p, nullptr) << "alloc(" << n << ") failed at pair " << i;
    static_cast<char*>(p)[0] = 1;
    static_cast<char*>(p)[n - 1] = 2;
  }
}

// A daemon, a client of it, and one shm region the client opened.
class LeaseStash : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(d.running()) << d.log();
    c = connect_to(d);
    ASSERT_NE(c, nullptr);
    absl::StatusOr<std::unique_ptr<Region>> opened = c->open("stash", region_options());
    ASSERT_TRUE(opened.ok()) << opened.status();
    r = std::move(*opened);
  }
  DaemonProcess d;
  std::unique_ptr<Client> c;
  std::unique_ptr<Region> r;
};

// 1-32 KiB objects fill blocks of two to thirty objects, so the number of
// blocks each class uses swings as the ring churns. With spares capped at a
// few blocks per class such a ring called the daemon once per ~1,000
// allocations; kept while used, once per tens of thousands.
TEST_F(LeaseStash, MidSizeChurnCallsTheDaemonRarely) {
  std::mt19937_64 rng(20261126);
  std::vector<void*> live(2048);
  for (void*& p : live) p = r->alloc(1024);
  churn(*r, live, rng, 1024, 32768, 100000);  // warm-up: the stash finds its level
  const uint64_t before = c->lease_calls();
  constexpr int kPairs = 400000;
  churn(*r, live, rng, 1024, 32768, kPairs);
  const uint64_t calls = c->lease_calls() - before;
  EXPECT_LE(calls, uint64_t{kPairs / 5000}) << "one call per " << kPairs / std::max<uint64_t>(calls, 1) << " allocations";
  for (void* p : live) r->free(p);
}

// Spares no thread heap took for a whole trim interval go back at the
// process's next block change, whatever class it is of.
TEST_F(LeaseStash, IdleSparesGoBackAtTheNextBlockChange) {
  // Objects of many classes, then all freed: their blocks wait as spares.
  std::vector<void*> objs;
  for (int i = 0; i < 6000; ++i) {
    size_t n = 16 + static_cast<size_t>(i % 40) * 200;
    void* p = r->alloc(n);
    ASSERT_NE(p, nullptr);
    memset(p, 1, n);
    objs.push_back(p);
  }
  for (void* p : objs) r->free(p);
  const uint64_t held = blocks_of(*r, getpid());
  ASSERT_GT(held, 100u);
  // Trims, each at a block change of a class not used before (a lease): the
  // first sees which spares sit idle, the next give them back (at most 128
  // blocks a trim).
  std::vector<void*> later;
  for (size_t size : {9000u, 12000u, 15000u}) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    later.push_back(r->alloc(size));
    ASSERT_NE(later.back(), nullptr);
  }
  // What stays: the one empty block a thread heap keeps per class (40), and
  // the three just leased with their batches' spares.
  EXPECT_LE(blocks_of(*r, getpid()), 48u) << "held " << held << " after the frees";
  for (void* p : later) r->free(p);
  // And the region is whole.
  std::string why;
  EXPECT_TRUE(check_all(d.socket(), &why)) << why;
}

}  // namespace
}  // namespace memd
