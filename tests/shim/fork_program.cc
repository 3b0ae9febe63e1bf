// fork() while other threads allocate (run with and without the memd shim;
// the output must be the same). Not linked to memd.
//
// Two background threads malloc/free/realloc without pause, so a fork lands
// at arbitrary points of their allocations, huge ones included (those take
// the arena lock). The child checks and frees objects the parent's threads
// allocated, allocates and frees a lot (in a thread of its own too), forks a
// grandchild once, and reports a checksum through a pipe. A child that
// deadlocks on a lock held at fork time hangs the parent's read: the test's
// timeout catches it. The parent keeps allocating between forks.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "test_rng.h"

namespace {

constexpr int kForks = 12;
constexpr int kBackgroundThreads = 2;


uint32_t pick_size(Rng& r) {
  uint32_t c = r.below(1000);
  if (c < 700) return 1 + r.below(256);
  if (c < 990) return 256 + r.below(40000);
  return 40000 + r.below(400000);  // huge: page runs under the arena lock
}

// An object whose every byte derives from (seed, size): checkable anywhere.
struct Obj {
  unsigned char* p;
  uint32_t size;
  unsigned char fill;
};

Obj make(uint32_t size, unsigned char fill) {
  auto* p = static_cast<unsigned char*>(malloc(size));
  if (p == nullptr) {
    static const char msg[] = "fork_program: malloc failed\n";
    ssize_t ignored = write(2, msg, sizeof msg - 1);
    (void)ignored;
    _exit(3);
  }
  memset(p, fill, size);
  return {p, size, fill};
}

bool intact(const Obj& o) {
  for (uint32_t i = 0; i < o.size; i += 61) {
    if (o.p[i] != o.fill) return false;
  }
  return o.p[o.size - 1] == o.fill;
}

std::atomic<bool> g_stop{false};
// Objects the background threads publish for the main thread (and so for
// every child) to free: remote frees to owners that do not exist in a child.
std::mutex g_published_mu;
std::vector<Obj> g_published;

void background(int t) {
  Rng r{uint64_t(100 + t)};
  std::vector<Obj> live;
  while (!g_stop.load(std::memory_order_relaxed)) {
    if (live.size() < 200 || r.below(2)) {
      live.push_back(make(pick_size(r), static_cast<unsigned char>(r.next())));
    } else {
      size_t i = r.below(static_cast<uint32_t>(live.size()));
      Obj o = live[i];
      live[i] = live.back();
      live.pop_back();
      if (!intact(o)) {
        fprintf(stderr, "fork_program: background object corrupted\n");
        abort();
      }
      if (r.below(8) == 0) {  // realloc keeps the prefix
        uint32_t n = pick_size(r);
        auto* q = static_cast<unsigned char*>(realloc(o.p, n));
        if (q == nullptr) abort();
        memset(q, o.fill, n);
        live.push_back({q, n, o.fill});
      } else if (r.below(4) == 0) {
        std::lock_guard<std::mutex> lock(g_published_mu);
        g_published.push_back(o);
      } else {
        free(o.p);
      }
    }
  }
  for (Obj& o : live) free(o.p);
}

// The child's work: deterministic for a given fork number.
uint64_t child_work(int n, std::vector<Obj>& inherited) {
  // Owned by threads that are gone in the child. How many there are depends
  // on timing, so they are checked but left out of the checksum.
  for (Obj& o : inherited) {
    if (!intact(o)) _exit(4);
    free(o.p);
  }
  uint64_t sum = 0;
  Rng r{uint64_t(5000 + n)};
  std::vector<Obj> live;
  for (int i = 0; i < 40000; ++i) {
    if (live.size() < 300 || r.below(2)) {
      live.push_back(make(pick_size(r), static_cast<unsigned char>(r.next())));
    } else {
      size_t k = r.below(static_cast<uint32_t>(live.size()));
      if (!intact(live[k])) _exit(5);
      sum = sum * 31 + live[k].size;
      free(live[k].p);
      live[k] = live.back();
      live.pop_back();
    }
  }
  // A thread created in the child attaches its own thread heap and frees
  // objects the child's main thread allocated.
  uint64_t thread_sum = 0;
  std::thread th([&] {
    for (Obj& o : live) {
      if (!intact(o)) _exit(6);
      thread_sum += o.size;
      free(o.p);
    }
    Rng tr{uint64_t(9000 + n)};
    for (int i = 0; i < 20000; ++i) {
      Obj o = make(pick_size(tr), 0x5a);
      thread_sum += o.size;
      free(o.p);
    }
  });
  th.join();
  return sum + thread_sum;
}

// fork, run child_work in the child; the parent reads the checksum.
bool fork_and_check(int n, std::vector<Obj>& inherited, uint64_t* checksum) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    close(fds[0]);
    uint64_t sum = child_work(n, inherited);
    if (n == 0) {  // a grandchild once: fork from a child that has allocated
      uint64_t inner = 0;
      std::vector<Obj> none;
      if (!fork_and_check(100, none, &inner)) _exit(7);
      sum ^= inner;
    }
    ssize_t w = write(fds[1], &sum, sizeof sum);
    _exit(w == sizeof sum ? 0 : 8);
  }
  close(fds[1]);
  uint64_t sum = 0;
  ssize_t got = read(fds[0], &sum, sizeof sum);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (got != sizeof sum || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "fork_program: child %d failed (read %zd, status %#x)\n", n, got, status);
    return false;
  }
  *checksum = sum;
  return true;
}

}  // namespace

int main() {
  std::vector<std::thread> threads;
  for (int t = 0; t < kBackgroundThreads; ++t) threads.emplace_back(background, t);
  Rng r{77};
  std::vector<Obj> mine;
  bool ok = true;
  for (int n = 0; n < kForks && ok; ++n) {
    // Objects to hand to the child: some the background threads made.
    std::vector<Obj> inherited;
    {
      std::lock_guard<std::mutex> lock(g_published_mu);
      inherited.swap(g_published);
    }
    uint64_t sum = 0;
    ok = fork_and_check(n, inherited, &sum);
    if (ok) printf("fork %d: child checksum %016" PRIx64 "\n", n, sum);
    // The parent still owns `inherited` (the child freed its copies).
    for (Obj& o : inherited) {
      if (!intact(o)) ok = false;
      free(o.p);
    }
    for (int i = 0; i < 5000; ++i) {  // the parent keeps allocating
      if (mine.size() < 200 || r.below(2)) {
        mine.push_back(make(pick_size(r), static_cast<unsigned char>(i)));
      } else {
        size_t k = r.below(static_cast<uint32_t>(mine.size()));
        if (!intact(mine[k])) ok = false;
        free(mine[k].p);
        mine[k] = mine.back();
        mine.pop_back();
      }
    }
  }
  g_stop = true;
  for (auto& th : threads) th.join();
  for (Obj& o : mine) free(o.p);
  for (Obj& o : g_published) free(o.p);
  printf("%s\n", ok ? "all forks ok" : "FAILED");
  return ok ? 0 : 1;
}
