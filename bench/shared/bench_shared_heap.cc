// bench_shared_heap: small-object alloc+free pairs in a shared or persistent
// heap, by one or more processes at once.
//
//   bench_shared_heap --allocator NAME [--workload shared_small|persistent_small]
//                     [--procs N] [--pairs N] [--slots N] [--min-size B] [--max-size B]
//                     [--seed S] [--dir DIR] [--heap-mib M]
//                     [--pairs N [--max-seconds S] | --seconds S] [--go-at NS]
//                     [--daemon-socket PATH] [--memd PATH]
//   bench_shared_heap --list        # the allocators compiled in, one per line
//
// The parent creates the heap, then forks --procs workers. Each worker opens
// (attaches to) the heap by name, fills a ring of --slots objects (sizes
// uniform in [min, max], from a fixed-seed generator, so every allocator sees
// the same sequence), tells the parent it is ready and waits. The parent
// releases all workers at once; each then runs steps: pick a random slot,
// check and free its object, allocate a new one of a random size, write a tag
// at its start and end. The timed part is this loop alone.
//
// Two modes:
//   fixed pairs (default, --pairs N)
//       every worker runs N steps. With --max-seconds a worker stops early
//       once its loop has run that long (for cases that cost milliseconds per
//       pair); the output then says capped=1 and counts the pairs done.
//   fixed window (--seconds S)
//       the parent releases the workers at time G and every worker runs its
//       loop until G + S (the same instant for all), reading the clock every
//       few pairs (as often as every pair for slow cases, at most every 1024
//       for fast ones, aiming at one read per ~100 us). So every worker runs
//       through the whole window, and the sum of the workers' own rates is
//       the rate of all of them working at once, however unequal the CPUs.
// --daemon-socket and --memd are for the memd-daemon family (see
// memd_daemon_heap.cc): a running memd to use, or the memd binary to start.
// --go-at NS (CLOCK_MONOTONIC nanoseconds, as Python's time.monotonic_ns):
// the parent releases its workers at that instant rather than as soon as they
// are ready, so that separate runs started together share one window (a
// control: two independent processes, each with its own heap).
//
// Output, one line of key=value pairs:
//   mode              window or pairs
//   pairs_per_s       the throughput of all workers: with --seconds
//                     sum_pairs_per_s, else span_pairs_per_s
//   sum_pairs_per_s   sum over workers of (worker pairs / worker loop time)
//   span_pairs_per_s  all workers' pairs / (last end - first start)
//   worker_pairs_per_s  each worker's own rate, comma-separated
//   ns_per_pair       the mean over workers of (worker loop time / worker
//                     pairs): what one process pays per pair while the others
//                     run too
//   overlap           fraction of the span in which every worker was running
//   first_start_ns .. last_end_ns  the span's ends, CLOCK_MONOTONIC
//   checksum          from sizes and tags (identical for every allocator with
//                     the same --procs, --pairs, --slots and --seed, unless
//                     capped; with --seconds it depends on the pairs done)
//   remote_calls      calls for memory to a remote party (memd-daemon: lease
//                     RPCs to the daemon) made by all workers in the timed
//                     loop, -1 if the family cannot count them
//   shared_check      ok when the objects the workers left live show up in the
//                     parent's own view of the heap (so they really allocated
//                     from the one segment), unknown when the family cannot tell
#include <signal.h>
#include <time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../workloads/common.h"
#include "shared_heap.h"

namespace shb {

std::vector<FamilyInfo>& registry() {
  static std::vector<FamilyInfo> families;
  return families;
}

namespace {

pid_t g_parent = 0;
Family* g_created = nullptr;  // removed by fail() in the parent

struct Options {
  std::string allocator;
  std::string workload = "shared_small";
  int procs = 1;
  uint64_t pairs = 1000000;
  uint32_t slots = 4096;
  uint32_t min_size = 8;
  uint32_t max_size = 512;
  uint64_t seed = 42;
  std::string dir = ".";
  size_t heap_mib = 256;
  double max_seconds = 0;  // 0: no cap
  double seconds = 0;      // > 0: fixed-window mode
  int64_t go_at_ns = 0;    // > 0: release the workers at this CLOCK_MONOTONIC instant
  bool pairs_given = false;
  std::string daemon_socket;
  std::string memd_binary;
};

// What the parent sends each worker to release it (8 bytes: the writes of
// all workers' messages together stay well under PIPE_BUF).
struct GoMessage {
  int64_t deadline_ns;  // fixed-window mode: when every worker stops; else 0
};

// What a worker sends back through the result pipe (well under PIPE_BUF, so
// each write is atomic even with several workers on one pipe).
struct WorkerResult {
  int32_t worker;
  int32_t ok;
  int64_t start_ns;
  int64_t end_ns;
  uint64_t pairs;
  uint64_t checksum;
  uint64_t live_bytes;  // requested bytes still allocated when the worker quit
  uint64_t token;
  uint64_t min_offset;
  uint64_t max_offset;
  int32_t capped;  // stopped by --max-seconds before --pairs
  int64_t remote_calls;  // in the timed loop, -1: not counted
};

static_assert(std::chrono::steady_clock::is_steady);

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("write to a pipe", true);
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Reads exactly n bytes; false on end of file (a worker died).
bool read_all(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("read from a pipe", true);
    if (r == 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

struct Slot {
  void* p = nullptr;
  uint64_t tag = 0;
  uint32_t size = 0;
};

void touch(Slot& s) {
  std::memcpy(s.p, &s.tag, sizeof s.tag);  // every size is >= 8
  static_cast<unsigned char*>(s.p)[s.size - 1] = static_cast<unsigned char>(s.tag >> 56);
}

void verify(const Slot& s) {
  uint64_t tag;
  std::memcpy(&tag, s.p, sizeof tag);
  if (tag != s.tag || static_cast<const unsigned char*>(s.p)[s.size - 1] != static_cast<unsigned char>(s.tag >> 56))
    fail("an object's contents changed while it was live (heap corruption)");
}

// Runs in the forked worker; never returns.
[[noreturn]] void worker_main(const Options& o, Family& family, int index, int ready_fd, int go_fd, int result_fd) {
  WorkerResult res{};
  res.worker = index;
  std::unique_ptr<Heap> heap = family.open(index);
  wl::Rng rng(o.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(index) + 1);
  std::vector<Slot> ring(o.slots);
  uint64_t checksum = 0;
  uint64_t min_off = UINT64_MAX, max_off = 0;
  auto next_object = [&](Slot& s) {
    s.size = static_cast<uint32_t>(rng.range(o.min_size, o.max_size));
    s.tag = rng.next();
    checksum = wl::mix(checksum, s.size ^ (s.tag << 12));
  };
  auto placed = [&](Slot& s) {
    if (s.p == nullptr) fail("the heap is out of memory");
    touch(s);
    uint64_t off = heap->offset(s.p);
    min_off = std::min(min_off, off);
    max_off = std::max(max_off, off);
  };
  heap->fill_begin();
  for (uint32_t i = 0; i < o.slots; ++i) {  // the live set, before the clock starts
    next_object(ring[i]);
    ring[i].p = heap->alloc(i, ring[i].size);
    placed(ring[i]);
  }
  heap->fill_end();

  auto step = [&]() {
    uint32_t i = static_cast<uint32_t>(rng.below(o.slots));
    Slot& s = ring[i];
    verify(s);
    void* old = s.p;
    next_object(s);
    s.p = heap->replace(i, old, s.size);
    placed(s);
  };

  char byte = 'r';
  write_all(ready_fd, &byte, 1);
  GoMessage go{};
  if (!read_all(go_fd, &go, sizeof go)) _exit(1);  // the parent gave up

  const int64_t calls_before = heap->remote_calls();
  res.start_ns = now_ns();
  uint64_t done = 0;
  if (o.seconds > 0) {
    // Fixed window: run until the common deadline. Read the clock before the
    // first pair, then every `every` pairs, doubling `every` (up to 1024)
    // while the pairs between two reads take less than 100 us.
    constexpr uint64_t kMaxEvery = 1024;
    constexpr int64_t kCheckNs = 100000;
    uint64_t every = 1, left = 1;
    int64_t last = res.start_ns;
    for (;; ++done) {
      if (--left == 0) {
        int64_t t = now_ns();
        if (t >= go.deadline_ns) break;
        if (every < kMaxEvery && t - last < kCheckNs) every *= 2;
        last = t;
        left = every;
      }
      step();
    }
  } else {
    const int64_t deadline =
        o.max_seconds > 0 ? res.start_ns + static_cast<int64_t>(o.max_seconds * 1e9) : INT64_MAX;
    for (; done < o.pairs; ++done) {
      if (done % 16 == 0 && deadline != INT64_MAX && now_ns() >= deadline) {
        res.capped = 1;
        break;
      }
      step();
    }
  }
  res.end_ns = now_ns();
  const int64_t calls_after = heap->remote_calls();
  res.remote_calls = calls_before < 0 ? -1 : calls_after - calls_before;

  for (const Slot& s : ring) {
    verify(s);
    res.live_bytes += s.size;
  }
  res.ok = 1;
  res.pairs = done;
  res.checksum = checksum;
  res.token = heap->token();
  res.min_offset = min_off;
  res.max_offset = max_off;
  heap.reset();  // closes this worker's handle; the live set stays in the heap
  write_all(result_fd, &res, sizeof res);
  _exit(0);
}

void usage() {
  std::fprintf(stderr,
               "usage: bench_shared_heap --allocator NAME [--workload shared_small|persistent_small] [--procs N]\n"
               "       [--pairs N] [--slots N] [--min-size B] [--max-size B] [--seed S] [--dir DIR] [--heap-mib M]\n"
               "       [--max-seconds S] [--seconds S] [--go-at NS] [--daemon-socket PATH] [--memd PATH]\n"
               "       bench_shared_heap --list\n");
  std::exit(2);
}

const FamilyInfo* find_family(const std::string& name) {
  for (const FamilyInfo& f : registry())
    if (f.name == name) return &f;
  return nullptr;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--list") {
      for (const FamilyInfo& f : registry()) std::printf("%s\t%s\n", f.name.c_str(), f.summary.c_str());
      std::exit(0);
    }
    if (i + 1 >= argc) usage();
    std::string v = argv[++i];
    auto number = [&]() -> uint64_t {
      char* end = nullptr;
      errno = 0;
      unsigned long long n = std::strtoull(v.c_str(), &end, 10);
      if (errno != 0 || end == v.c_str() || *end != '\0') usage();
      return n;
    };
    if (a == "--allocator") o.allocator = v;
    else if (a == "--workload") o.workload = v;
    else if (a == "--procs") o.procs = static_cast<int>(number());
    else if (a == "--pairs") o.pairs = number(), o.pairs_given = true;
    else if (a == "--slots") o.slots = static_cast<uint32_t>(number());
    else if (a == "--min-size") o.min_size = static_cast<uint32_t>(number());
    else if (a == "--max-size") o.max_size = static_cast<uint32_t>(number());
    else if (a == "--seed") o.seed = number();
    else if (a == "--dir") o.dir = v;
    else if (a == "--heap-mib") o.heap_mib = number();
    else if (a == "--max-seconds" || a == "--seconds") {
      char* end = nullptr;
      double d = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(d >= 0)) usage();
      (a == "--seconds" ? o.seconds : o.max_seconds) = d;
    }
    else if (a == "--go-at") o.go_at_ns = static_cast<int64_t>(number());
    else if (a == "--daemon-socket") o.daemon_socket = v;
    else if (a == "--memd") o.memd_binary = v;
    else usage();
  }
  if (o.allocator.empty() || o.procs < 1 || o.slots < 1 || o.min_size < 8 || o.max_size < o.min_size) usage();
  if (o.seconds > 0 && (o.pairs_given || o.max_seconds > 0)) {
    std::fprintf(stderr, "bench_shared_heap: --seconds (a fixed window) excludes --pairs and --max-seconds\n");
    usage();
  }
  if (o.workload != "shared_small" && o.workload != "persistent_small") usage();
  return o;
}

int run(const Options& o) {
  const FamilyInfo* info = find_family(o.allocator);
  if (info == nullptr) fail("unknown or not compiled-in allocator '" + o.allocator + "' (see --list)");

  Config config;
  config.workload = o.workload;
  config.dir = o.dir;
  config.stem = "memd-bench-" + std::to_string(getpid());
  config.heap_bytes = o.heap_mib << 20;
  config.workers = o.procs;
  config.slots = o.slots;
  config.max_size = o.max_size;
  config.daemon_socket = o.daemon_socket;
  config.memd_binary = o.memd_binary;
  std::unique_ptr<Family> family = info->make(config);
  if (o.procs > family->max_workers())
    fail(o.allocator + " supports at most " + std::to_string(family->max_workers()) + " process(es)");

  uint64_t token = wl::Rng(static_cast<uint64_t>(now_ns()) ^ static_cast<uint64_t>(getpid())).next() | 1;
  family->create(token);
  g_created = family.get();
  int64_t used_before = family->used_bytes();

  int ready[2], go[2], result[2];
  if (pipe(ready) != 0 || pipe(go) != 0 || pipe(result) != 0) fail("pipe", true);
  std::vector<pid_t> pids;
  std::fflush(nullptr);
  for (int w = 0; w < o.procs; ++w) {
    pid_t pid = fork();
    if (pid < 0) fail("fork", true);
    if (pid == 0) {
      close(ready[0]);
      close(go[1]);
      close(result[0]);
      worker_main(o, *family, w, ready[1], go[0], result[1]);
    }
    pids.push_back(pid);
  }
  close(ready[1]);
  close(go[0]);
  close(result[1]);

  bool all_ready = true;
  for (int w = 0; w < o.procs && all_ready; ++w) {
    char byte;
    all_ready = read_all(ready[0], &byte, 1);
  }
  int64_t go_ns = 0, go_late_ns = 0;
  if (all_ready) {
    if (o.go_at_ns > 0) {
      timespec at{static_cast<time_t>(o.go_at_ns / 1000000000), static_cast<long>(o.go_at_ns % 1000000000)};
      while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, nullptr) == EINTR) {
      }
    }
    go_ns = now_ns();
    if (o.go_at_ns > 0) go_late_ns = go_ns - o.go_at_ns;  // > 0: the workers were not ready in time
    // The window is the same for all workers: from the release on, or from
    // --go-at on (then runs started together end together, even if one was late).
    int64_t window_start = o.go_at_ns > 0 ? o.go_at_ns : go_ns;
    GoMessage msg{o.seconds > 0 ? window_start + static_cast<int64_t>(o.seconds * 1e9) : 0};
    std::vector<GoMessage> msgs(static_cast<size_t>(o.procs), msg);
    write_all(go[1], msgs.data(), msgs.size() * sizeof(GoMessage));
  }
  close(go[1]);  // a worker still waiting sees end of file and quits

  std::vector<WorkerResult> results;
  WorkerResult r;
  while (read_all(result[0], &r, sizeof r)) results.push_back(r);
  bool exited_cleanly = true;
  for (pid_t pid : pids) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) exited_cleanly = false;
  }
  if (!all_ready || !exited_cleanly || results.size() != static_cast<size_t>(o.procs))
    fail("a worker failed (see its message above)");
  std::sort(results.begin(), results.end(), [](auto& a, auto& b) { return a.worker < b.worker; });

  int64_t used_after = family->used_bytes();
  g_created = nullptr;
  family->remove();

  int64_t first_start = INT64_MAX, last_start = 0, first_end = INT64_MAX, last_end = 0;
  uint64_t total_pairs = 0, live = 0, checksum = 0, min_off = UINT64_MAX, max_off = 0;
  double ns_per_pair_sum = 0, rate_sum = 0;
  std::string worker_rates;
  bool tokens_ok = true;
  int capped = 0;
  int64_t remote_calls = 0;
  for (const WorkerResult& w : results) {
    first_start = std::min(first_start, w.start_ns);
    last_start = std::max(last_start, w.start_ns);
    first_end = std::min(first_end, w.end_ns);
    last_end = std::max(last_end, w.end_ns);
    total_pairs += w.pairs;
    live += w.live_bytes;
    checksum = wl::mix(checksum, w.checksum);
    min_off = std::min(min_off, w.min_offset);
    max_off = std::max(max_off, w.max_offset);
    double elapsed = static_cast<double>(w.end_ns - w.start_ns);
    ns_per_pair_sum += elapsed / static_cast<double>(std::max<uint64_t>(w.pairs, 1));
    double rate = elapsed > 0 ? static_cast<double>(w.pairs) * 1e9 / elapsed : 0;
    rate_sum += rate;
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.1f", worker_rates.empty() ? "" : ",", rate);
    worker_rates += buf;
    tokens_ok = tokens_ok && w.token == token;
    capped |= w.capped;
    remote_calls = w.remote_calls < 0 || remote_calls < 0 ? -1 : remote_calls + w.remote_calls;
  }
  if (!tokens_ok) fail("a worker opened another heap than the one the parent created (token differs)");
  // Every live object holds at least its requested size, so the parent must
  // see at least that much more in use than before the workers ran.
  const char* shared_check = "unknown";
  if (used_before >= 0 && used_after >= 0)
    shared_check = used_after - used_before >= static_cast<int64_t>(live) ? "ok" : "FAIL";

  double span = static_cast<double>(last_end - first_start);
  double overlap = std::max<double>(0, static_cast<double>(first_end - last_start)) / span;
  double span_rate = static_cast<double>(total_pairs) * 1e9 / span;
  const bool window = o.seconds > 0;
  std::printf(
      "allocator=%s workload=%s procs=%d mode=%s window_s=%g pairs=%" PRIu64 " span_ns=%.0f pairs_per_s=%.1f "
      "sum_pairs_per_s=%.1f span_pairs_per_s=%.1f worker_pairs_per_s=%s ns_per_pair=%.2f overlap=%.3f "
      "first_start_ns=%" PRId64 " last_start_ns=%" PRId64 " first_end_ns=%" PRId64 " last_end_ns=%" PRId64
      " go_late_ns=%" PRId64 " checksum=%016" PRIx64 " live_bytes=%" PRIu64 " used_before=%" PRId64
      " used_after=%" PRId64 " shared_check=%s offset_min=%" PRIu64 " offset_max=%" PRIu64 " capped=%d"
      " remote_calls=%" PRId64 "\n",
      o.allocator.c_str(), o.workload.c_str(), o.procs, window ? "window" : "pairs", o.seconds, total_pairs, span,
      window ? rate_sum : span_rate, rate_sum, span_rate, worker_rates.c_str(),
      ns_per_pair_sum / static_cast<double>(results.size()), overlap, first_start, last_start, first_end, last_end,
      go_late_ns, checksum, live, used_before, used_after, shared_check, min_off, max_off, capped, remote_calls);
  return std::strcmp(shared_check, "FAIL") == 0 ? 1 : 0;
}

}  // namespace

[[noreturn]] void fail(const std::string& what, bool with_errno) {
  int err = errno;
  std::fprintf(stderr, "bench_shared_heap[%d]: %s%s%s\n", static_cast<int>(getpid()), what.c_str(),
               with_errno ? ": " : "", with_errno ? std::strerror(err) : "");
  if (getpid() != g_parent) _exit(1);  // a worker: leave the heap to the parent
  if (Family* f = g_created) {
    g_created = nullptr;
    f->remove();
  }
  std::exit(1);
}

}  // namespace shb

int main(int argc, char** argv) {
  shb::g_parent = getpid();
  signal(SIGPIPE, SIG_IGN);  // a dead worker's pipe reports EPIPE instead of killing the parent
  return shb::run(shb::parse(argc, argv));
}
