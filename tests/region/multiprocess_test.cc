// Several real processes on one region: children forked after the owner
// starts serving attach through its socket, allocate and free concurrently,
// free each other's objects, and die by SIGKILL at random instants. The
// region must stay consistent and a dead child's blocks must be taken back
// and reused.
#include <gtest/gtest.h>
#include <spawn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "client/memd_region.h"
#include "region/region.h"
#include "region/region_internals.h"
#include "region_test_util.h"

extern char** environ;

namespace memd {
namespace {

using testing::region_name;
using testing::small_options;
using testing::TempDir;

// A mailbox in the region: objects handed from one process to another to
// free. Offsets + 1; 0 is an empty slot.
struct Mailbox {
  static constexpr int kSlots = 4096;
  std::atomic<uint64_t> slot[kSlots];
  std::atomic<int> ready;  // children that finished attaching
  std::atomic<int> go;
};

// What each object holds, so that a reader can tell it is intact.
void fill(char* p, size_t size, uint32_t seed) {
  std::memcpy(p, &seed, 4);
  for (size_t i = 4; i < size; ++i) p[i] = static_cast<char>(seed + i);
}
bool intact(const char* p, size_t size) {
  uint32_t seed;
  std::memcpy(&seed, p, 4);
  for (size_t i = 4; i < size; ++i) {
    if (p[i] != static_cast<char>(seed + i)) return false;
  }
  return true;
}
// The size is derived from the seed so that the receiver knows it.
size_t size_of_seed(uint32_t seed) { return 8 + seed % 700 + (seed % 31 == 0 ? 9000 : 0); }

// One child's work: random allocation and frees of its own objects, plus
// posting objects to the mailbox and freeing what others posted. Returns an
// exit code: 0 fine, else which check failed.
int child_work(const std::string& name, Discipline d, const std::string& sock, int id, int ops) {
  auto r = Region::attach(name, d, sock);
  if (!r.ok()) {
    fprintf(stderr, "child %d: %s\n", id, std::string(r.status().message()).c_str());
    return 10;
  }
  Region& region = **r;
  auto* box = region.find<Mailbox>("mailbox");
  if (box == nullptr) return 11;
  box->ready.fetch_add(1);
  while (box->go.load() == 0) std::this_thread::yield();
  std::mt19937 rng(1000 + id);
  std::vector<char*> mine;
  for (int i = 0; i < ops; ++i) {
    uint32_t action = rng() % 10;
    if (action < 5 || mine.empty()) {
      uint32_t seed = rng();
      size_t size = size_of_seed(seed);
      auto* p = static_cast<char*>(region.alloc(size));
      if (p == nullptr) return 12;
      fill(p, size, seed);
      mine.push_back(p);
    } else if (action < 8) {
      size_t k = rng() % mine.size();
      char* p = mine[k];
      uint32_t seed;
      std::memcpy(&seed, p, 4);
      if (!intact(p, size_of_seed(seed))) return 13;
      region.free(p);
      mine[k] = mine.back();
      mine.pop_back();
    } else if (action == 8) {
      // Post one of ours for another process to free.
      size_t k = rng() % mine.size();
      uint64_t off = region.offset_of(mine[k]) + 1;
      int s = static_cast<int>(rng() % Mailbox::kSlots);
      uint64_t empty = 0;
      if (box->slot[s].compare_exchange_strong(empty, off)) {
        mine[k] = mine.back();
        mine.pop_back();
      }
    } else {
      // Free something another process posted.
      int s = static_cast<int>(rng() % Mailbox::kSlots);
      uint64_t off = box->slot[s].exchange(0);
      if (off != 0) {
        auto* p = static_cast<char*>(region.at(off - 1));
        uint32_t seed;
        std::memcpy(&seed, p, 4);
        if (!intact(p, size_of_seed(seed))) return 14;
        region.free(p);
      }
    }
  }
  for (char* p : mine) region.free(p);
  return 0;
}

class MultiProcessTest : public ::testing::TestWithParam<Discipline> {
 protected:
  void SetUp() override {
    name_ = region_name(GetParam(), dir_, "mp");
    sock_ = dir_.file("owner.sock");
    auto r = Region::create(name_, small_options(GetParam(), size_t{256} << 20));
    ASSERT_TRUE(r.ok()) << r.status();
    owner_ = std::move(*r);
    ASSERT_TRUE(owner_->serve(sock_).ok());
    box_ = owner_->find_or_construct<Mailbox>("mailbox");
    ASSERT_NE(box_, nullptr);
  }
  void TearDown() override {
    owner_.reset();
    (void)Region::remove(name_, GetParam());
  }
  pid_t spawn(int id, int ops) {
    pid_t pid = fork();
    if (pid == 0) _exit(child_work(name_, GetParam(), sock_, id, ops));
    return pid;
  }
  uint32_t clients() const { return RegionInternals::of(*owner_)->server->clients(); }
  // Blocks still owned by an owner slot nobody holds, or by a lease that is
  // not active: what a dead process would leave if it were not reclaimed.
  int orphaned_blocks() const {
    const heap::Region& r = RegionInternals::of(*owner_)->region;
    int n = 0;
    uint32_t committed = r.header->page_heap.committed_pages.load();
    for (uint32_t p = 0; p < committed;) {
      heap::PageDesc d = r.page(heap::PageIndex{p});
      uint32_t len = r.block(heap::PageIndex{p}).pages.value;
      if (d.block == p && (d.kind == heap::PageKind::kSegregated || d.kind == heap::PageKind::kLarge)) {
        uint32_t owner = r.block(heap::PageIndex{p}).owner_word.load() >> 1;
        if (owner != 0) {
          uint32_t holder = r.slots[owner & (heap::kMaxOwnerSlots - 1)].in_use.load();
          bool live = holder == heap::kProcessHolder ||
                      (holder != 0 && r.leases[holder - 1].state.load() == heap::LeaseState::kActive);
          n += !live;
        }
      }
      p += len ? len : 1;
    }
    return n;
  }
  // Frees what children left in the mailbox (the owner can free anything).
  void drain_mailbox() {
    for (auto& s : box_->slot) {
      uint64_t off = s.exchange(0);
      if (off) owner_->free(owner_->at(off - 1));
    }
  }
  void wait_for_clients(uint32_t n) {
    for (int i = 0; i < 5000 && clients() != n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ASSERT_EQ(clients(), n);
  }

  TempDir dir_;
  std::string name_, sock_;
  std::unique_ptr<Region> owner_;
  Mailbox* box_ = nullptr;
};

TEST_P(MultiProcessTest, ProcessesShareOneHeapAndFreeEachOthersObjects) {
  constexpr int kChildren = 4;
  std::vector<pid_t> kids;
  for (int i = 0; i < kChildren; ++i) kids.push_back(spawn(i, 60000));
  while (box_->ready.load() < kChildren) std::this_thread::yield();
  box_->go.store(1);
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << status;
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  wait_for_clients(0);
  EXPECT_EQ(orphaned_blocks(), 0);
  drain_mailbox();
  EXPECT_TRUE(owner_->check().ok()) << owner_->check();
  // Only the mailbox is left.
  EXPECT_EQ(owner_->stat().busy_objects, 1u);
}

TEST_P(MultiProcessTest, AKilledProcessLeavesAConsistentRegionAndItsBlocksAreReused) {
  std::mt19937 rng(99);
  for (int round = 0; round < 6; ++round) {
    box_->ready.store(0);
    box_->go.store(0);
    std::vector<pid_t> kids;
    for (int i = 0; i < 3; ++i) kids.push_back(spawn(round * 10 + i, 200000));
    while (box_->ready.load() < 3) std::this_thread::yield();
    box_->go.store(1);
    // Kill one at a random instant while all of them work.
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 40000));
    ASSERT_EQ(kill(kids[0], SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(kids[0], &status, 0), kids[0]);
    EXPECT_TRUE(WIFSIGNALED(status));
    for (size_t i = 1; i < kids.size(); ++i) {
      ASSERT_EQ(waitpid(kids[i], &status, 0), kids[i]);
      ASSERT_TRUE(WIFEXITED(status)) << status;
      EXPECT_EQ(WEXITSTATUS(status), 0) << "round " << round;
    }
    wait_for_clients(0);
    EXPECT_EQ(orphaned_blocks(), 0) << "round " << round;
    EXPECT_TRUE(owner_->check().ok()) << "round " << round << ": " << owner_->check();
  }
  // The killed children's blocks were abandoned, not lost: later processes
  // adopted them, so the region did not grow without bound.
  heap::RegionStats s = owner_->stat();
  EXPECT_LT(s.pages_committed * 4096, size_t{200} << 20);
  drain_mailbox();
  EXPECT_TRUE(owner_->check().ok()) << owner_->check();
}

TEST_P(MultiProcessTest, AClientSeesPagesTheOwnerAddsLater) {
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  int done[2];
  ASSERT_EQ(pipe(done), 0);
  pid_t pid = fork();
  if (pid == 0) {
    auto r = Region::attach(name_, GetParam(), sock_);
    if (!r.ok()) _exit(10);
    // Lease blocks (and spares) of many classes, and keep them while the
    // owner checks the region.
    for (int i = 0; i < 3000; ++i) {
      if ((*r)->alloc(16 + (i % 60) * 8 + (i % 7 == 0 ? 5000 : 0)) == nullptr) _exit(14);
    }
    char c = 1;
    if (write(done[1], &c, 1) != 1) _exit(11);
    uint64_t off = 0;
    if (read(pipefd[0], &off, sizeof off) != sizeof off) _exit(12);
    // An object in pages committed after this process mapped the region.
    auto* p = static_cast<unsigned char*>((*r)->at(off));
    for (size_t i = 0; i < (size_t{64} << 20); i += 4096) {
      if (p[i] != 0xab) _exit(13);
    }
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(done[0], &c, 1), 1);
  EXPECT_TRUE(owner_->check().ok()) << owner_->check();
  size_t before = owner_->stat().pages_committed;
  auto* big = static_cast<char*>(owner_->alloc(size_t{64} << 20));
  ASSERT_NE(big, nullptr);
  EXPECT_GT(owner_->stat().pages_committed, before);
  std::memset(big, 0xab, size_t{64} << 20);
  uint64_t off = owner_->offset_of(big);
  ASSERT_EQ(write(pipefd[1], &off, sizeof off), static_cast<ssize_t>(sizeof off));
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

struct Once {
  std::atomic<int> constructions{0};
  std::atomic<int> users{0};
  Once() {
    constructions.fetch_add(1);
    // Widen the window in which a second process could construct too.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
};

TEST_P(MultiProcessTest, FindOrConstructIsAtomicAcrossProcesses) {
  constexpr int kChildren = 4;
  std::vector<pid_t> kids;
  for (int id = 0; id < kChildren; ++id) {
    pid_t pid = fork();
    if (pid == 0) {
      auto r = Region::attach(name_, GetParam(), sock_);
      if (!r.ok()) _exit(10);
      auto* box = (*r)->find<Mailbox>("mailbox");
      box->ready.fetch_add(1);
      while (box->go.load() == 0) std::this_thread::yield();
      Once* o = (*r)->find_or_construct<Once>("once");
      if (o == nullptr) _exit(11);
      o->users.fetch_add(1);
      box->slot[id].store((*r)->offset_of(o) + 1);
      _exit(0);
    }
    kids.push_back(pid);
  }
  while (box_->ready.load() < kChildren) std::this_thread::yield();
  box_->go.store(1);
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  Once* o = owner_->find<Once>("once");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->constructions.load(), 1);
  EXPECT_EQ(o->users.load(), kChildren);
  for (int id = 0; id < kChildren; ++id) EXPECT_EQ(box_->slot[id].load(), owner_->offset_of(o) + 1);
}

// A child that attaches to the region and constructs a root of type T,
// whose constructor tells the parent (one byte on `in_constructor`) that
// it holds the roots lock, then hangs or stops there.
int in_constructor = -1;

template <class T>
pid_t fork_constructing(const std::string& region, Discipline d, const std::string& socket, int signal_fd,
                        const char* root) {
  pid_t pid = fork();
  if (pid == 0) {
    auto r = Region::attach(region, d, socket);
    if (!r.ok()) _exit(10);
    in_constructor = signal_fd;
    _exit((*r)->find_or_construct<T>(root) != nullptr ? 0 : 11);
  }
  return pid;
}
struct Hangs {
  Hangs() {
    char c = 1;
    if (write(in_constructor, &c, 1) != 1) _exit(30);
    for (;;) pause();  // killed here, holding the roots lock
  }
};

TEST_P(MultiProcessTest, AProcessKilledWhileMakingARootReleasesTheRootsLock) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork_constructing<Hangs>(name_, GetParam(), sock_, fds[1], "hangs");
  char c;
  ASSERT_EQ(read(fds[0], &c, 1), 1);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  // The robust lock hands the next locker the repair: the half-made root is
  // dropped, and roots work again.
  int* v = owner_->find_or_construct<int>("after", 5);
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(*v, 5);
  EXPECT_EQ(owner_->find<Hangs>("hangs"), nullptr);
  EXPECT_NE(owner_->find_or_construct<int>("hangs", 1), nullptr);  // the name is free again
}

struct StopsItself {
  StopsItself() {
    char c = 1;
    if (write(in_constructor, &c, 1) != 1) _exit(30);
    raise(SIGSTOP);  // stopped here, holding the roots lock
  }
};

// A stopped process is not a dead one: the robust lock stays its own. Root
// calls of every other process give up after the bound (ETIMEDOUT, and a
// report naming the region) instead of waiting for it without end, and
// work again once it runs and lets go.
TEST_P(MultiProcessTest, AProcessStoppedWhileMakingARootMakesRootCallsTimeOut) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork_constructing<StopsItself>(name_, GetParam(), sock_, fds[1], "stopped");
  char c;
  ASSERT_EQ(read(fds[0], &c, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, WUNTRACED), pid);
  ASSERT_TRUE(WIFSTOPPED(status)) << status;

  // Should a call wait without bound, the child is let go after 30 s: the
  // call then returns, and the test fails instead of hanging.
  std::atomic<bool> returned{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 3000 && !returned.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!returned.load()) kill(pid, SIGCONT);
  });
  setenv("MEMD_ROOTS_LOCK_TIMEOUT_MS", "300", 1);
  ::testing::internal::CaptureStderr();
  auto start = std::chrono::steady_clock::now();
  errno = 0;
  int* v = owner_->find_or_construct<int>("while-stopped", 1);
  int v_errno = errno;
  auto waited = std::chrono::steady_clock::now() - start;
  errno = 0;
  bool destroyed = owner_->destroy<int>("while-stopped");
  int destroy_errno = errno;
  // The C API on the same region (a memd_region* is a memd::Region*).
  int created = -1;
  errno = 0;
  void* bytes = memd_region_root(reinterpret_cast<memd_region*>(owner_.get()), "bytes", 16, &created);
  int bytes_errno = errno;
  std::string report = ::testing::internal::GetCapturedStderr();
  returned.store(true);
  watchdog.join();
  unsetenv("MEMD_ROOTS_LOCK_TIMEOUT_MS");

  EXPECT_EQ(v, nullptr);
  EXPECT_EQ(v_errno, ETIMEDOUT) << std::strerror(v_errno);
  EXPECT_GE(waited, std::chrono::milliseconds(300));  // it did wait for the holder, up to the bound
  EXPECT_LT(waited, std::chrono::seconds(20));
  EXPECT_FALSE(destroyed);
  EXPECT_EQ(destroy_errno, ETIMEDOUT) << std::strerror(destroy_errno);
  EXPECT_EQ(bytes, nullptr);
  EXPECT_EQ(bytes_errno, ETIMEDOUT) << std::strerror(bytes_errno);
  EXPECT_EQ(created, 0);
  EXPECT_NE(report.find("region " + RegionInternals::of(*owner_)->name + ": the roots lock has been held longer than 300 ms"),
            std::string::npos)
      << report;

  // Let go, the holder finishes its root, and roots work for everyone.
  kill(pid, SIGCONT);
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_NE(owner_->find<StopsItself>("stopped"), nullptr);
  int* after = owner_->find_or_construct<int>("after", 7);
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(*after, 7);
  close(fds[0]);
  close(fds[1]);
}

TEST_P(MultiProcessTest, ANewOwnerWaitsForTheClientsOfACrashedOne) {
  // The owner is a child here, so that it can be killed.
  owner_.reset();
  int fds[2], client_fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(pipe(client_fds), 0);
  std::string sock2 = dir_.file("owner2.sock");
  pid_t owner = fork();
  if (owner == 0) {
    auto r = Region::open(name_, GetParam());
    if (!r.ok() || !(*r)->serve(sock2).ok()) _exit(10);
    char c = 1;
    if (write(fds[1], &c, 1) != 1) _exit(11);
    for (;;) pause();
  }
  char c;
  ASSERT_EQ(read(fds[0], &c, 1), 1);
  pid_t client = fork();
  if (client == 0) {
    auto r = Region::attach(name_, GetParam(), sock2);
    if (!r.ok() || (*r)->alloc(100) == nullptr) _exit(10);
    char one = 1;
    if (write(client_fds[1], &one, 1) != 1) _exit(11);
    for (;;) pause();
  }
  ASSERT_EQ(read(client_fds[0], &c, 1), 1);
  int status;
  ASSERT_EQ(kill(owner, SIGKILL), 0);
  ASSERT_EQ(waitpid(owner, &status, 0), owner);
  auto refused = Region::open(name_, GetParam());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(refused.status().message().find(std::to_string(client)), std::string::npos) << refused.status();
  ASSERT_EQ(kill(client, SIGKILL), 0);
  ASSERT_EQ(waitpid(client, &status, 0), client);
  auto r = Region::open(name_, GetParam());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE((*r)->check().ok()) << (*r)->check();
  EXPECT_NE((*r)->find<Mailbox>("mailbox"), nullptr);
  owner_ = std::move(*r);
}

// Threads of a client come and go: each exit abandons its blocks, which the
// owner lists and the next thread (of any process) adopts. The client is a
// fresh process (spawned, not forked: a process forked from one with threads
// may not start threads of its own under ThreadSanitizer).
int client_threads_work(const std::string& name, Discipline d, const std::string& sock) {
  auto r = Region::attach(name, d, sock);
  if (!r.ok()) return 10;
  Region& region = **r;
  auto* box = region.find<Mailbox>("mailbox");
  if (box == nullptr) return 12;
  std::atomic<int> bad{0};
  for (int gen = 0; gen < 5; ++gen) {
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t, gen] {
        std::mt19937 rng(gen * 10 + t);
        std::vector<char*> mine;
        for (int i = 0; i < 5000; ++i) {
          uint32_t seed = rng();
          size_t size = size_of_seed(seed);
          auto* p = static_cast<char*>(region.alloc(size));
          if (p == nullptr) {
            ++bad;
            return;
          }
          fill(p, size, seed);
          mine.push_back(p);
        }
        // Keep a tenth, post a fiftieth to the parent, free the rest.
        for (size_t i = 0; i < mine.size(); ++i) {
          if (i % 10 == 0) continue;
          if (i % 50 == 1) {
            box->slot[(gen * 4 + t) * 100 + i / 50].store(region.offset_of(mine[i]) + 1);
            continue;
          }
          region.free(mine[i]);
        }
      });
    }
    for (auto& th : threads) th.join();
  }
  return bad.load() ? 11 : 0;
}

const char* kThreadsChildEnv = "MEMD_CLIENT_THREADS_CHILD";

TEST(ClientThreadsChild, Run) {
  const char* args = getenv(kThreadsChildEnv);
  if (args == nullptr) GTEST_SKIP() << "runs only as the child of ThreadsOfAClientComeAndGo";
  std::vector<std::string> f = testing::split_fields(args);  // name|socket|discipline
  ASSERT_EQ(f.size(), 3u);
  ASSERT_EQ(client_threads_work(f[0], static_cast<Discipline>(std::atoi(f[2].c_str())), f[1]), 0);
}

TEST_P(MultiProcessTest, ThreadsOfAClientComeAndGo) {
  int status = testing::run_self("ClientThreadsChild.*", {std::string(kThreadsChildEnv) + "=" + name_ + "|" + sock_ +
                                                             "|" + std::to_string(static_cast<int>(GetParam()))});
  ASSERT_TRUE(WIFEXITED(status)) << status;
  ASSERT_EQ(WEXITSTATUS(status), 0);
  wait_for_clients(0);
  EXPECT_EQ(orphaned_blocks(), 0);
  EXPECT_TRUE(owner_->check().ok()) << owner_->check();
  // The posted objects are intact; the owner frees them.
  int posted = 0;
  for (auto& s : box_->slot) {
    uint64_t off = s.exchange(0);
    if (off == 0) continue;
    auto* p = static_cast<char*>(owner_->at(off - 1));
    uint32_t seed;
    std::memcpy(&seed, p, 4);
    ASSERT_TRUE(intact(p, size_of_seed(seed)));
    owner_->free(p);
    ++posted;
  }
  EXPECT_EQ(posted, 5 * 4 * 100);
  EXPECT_TRUE(owner_->check().ok()) << owner_->check();
  // What the threads kept is still there: 500 objects per thread.
  EXPECT_EQ(owner_->stat().busy_objects, 1u + 5 * 4 * 500);
}

TEST_P(MultiProcessTest, AttachWithoutAnOwnerFailsClearly) {
  auto r = Region::attach(name_, GetParam(), dir_.file("nobody.sock"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
}

INSTANTIATE_TEST_SUITE_P(Disciplines, MultiProcessTest,
                         ::testing::Values(Discipline::kShm, Discipline::kFile),
                         testing::discipline_test_name);

}  // namespace
}  // namespace memd
