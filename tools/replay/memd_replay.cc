// memd-replay TRACE: replays a trace (docs/trace.md) against whatever malloc
// the process has (LD_PRELOAD picks it; memdctl replay runs it once per
// allocator and method) and prints what it cost, one line:
//
//   ops=N allocs=A frees=F resizes=R skipped=S failed=X seconds=T base_kib=B peak_kib=P live=L region_busy=K
//
// live: the blocks the trace left live; region_busy: the live blocks the
// regions count at the end (MEMD_REPLAY_REGION best or pool), else -1.
//
// With MEMD_REPLAY_REGION=best, pool or last the calls go to regions of
// vmalloc.h instead of malloc (Vmdcheap, private memory), as the Vmalloc
// paper's Table 3 replays its traces under Vmlast and Vmbest: `last` sends
// every call to one Vmlast region (a free of any block but the most recent
// is ignored, as Vmlast ignores it); `pool` sends the trace's most frequent
// allocation size to a Vmpool region and every other size to a Vmbest
// region, as a program that keeps its most common object in a pool of its
// own would (the paper's mt.ioQ); `best` sends everything to one Vmbest region.
//
// The trace is read and numbered first (tools/replay/trace_format.h); the
// timed part makes only the traced calls, in the trace's order, on one
// thread, writing one byte per page of each new or resized block (so that
// the space is resident, as the traced program's was). Space is the peak of
// the process's resident memory sampled every 1024 calls, over what it was
// before the first call.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "client/vmalloc.h"
#include "tools/replay/trace_format.h"

namespace {

long resident_kib() {
  int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[128];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  long size = 0, resident = 0;
  if (std::sscanf(buf, "%ld %ld", &size, &resident) != 2) return 0;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

double now_seconds() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

void touch(char* p, size_t size) {
  for (size_t i = 0; i < size; i += 4096) p[i] = static_cast<char>(i);
}

// The numbered calls of a trace in memory no allocator owns.
struct Loaded {
  const memd::replay::ReplayOp* ops = nullptr;
  size_t count = 0;
  uint32_t slots = 0;
  uint64_t skipped = 0;
};

// What the parsing child hands back ahead of the calls.
struct LoadHeader {
  int ok;
  char error[500];
  uint64_t count, slots, skipped;
};

void* map_anonymous(size_t bytes, int flags) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// Reads and numbers the trace in a child process, which hands the calls
// back in a shared mapping: the text and the parse's maps are then in no
// allocator's heap when the replay starts, so that the space the replay
// measures is its own (a freed 80 MB text in glibc's heap would otherwise
// serve the replay's first megabytes at no cost in resident memory).
bool load(const char* path, Loaded* out) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    std::fprintf(stderr, "memd-replay: cannot read %s: %s\n", path, std::strerror(errno));
    return false;
  }
  size_t bytes = static_cast<size_t>(st.st_size);
  const char* text = static_cast<const char*>(bytes != 0 ? mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0) : nullptr);
  close(fd);
  if (text == MAP_FAILED) {
    std::fprintf(stderr, "memd-replay: cannot map %s: %s\n", path, std::strerror(errno));
    return false;
  }
  size_t lines = 1;
  for (size_t i = 0; i < bytes; ++i) lines += text[i] == '\n';
  size_t shared_bytes = sizeof(LoadHeader) + lines * sizeof(memd::replay::ReplayOp);
  auto* header = static_cast<LoadHeader*>(map_anonymous(shared_bytes, MAP_SHARED));
  if (header == nullptr) {
    std::fprintf(stderr, "memd-replay: cannot map %zu bytes\n", shared_bytes);
    return false;
  }
  auto* ops = reinterpret_cast<memd::replay::ReplayOp*>(header + 1);
  pid_t child = fork();
  if (child == 0) {
    absl::StatusOr<memd::replay::Replay> r = memd::replay::read_trace(std::string_view(text, bytes));
    if (!r.ok()) {
      std::snprintf(header->error, sizeof header->error, "%s", std::string(r.status().message()).c_str());
      _exit(0);
    }
    std::memcpy(ops, r->ops.data(), r->ops.size() * sizeof *ops);
    header->count = r->ops.size();
    header->slots = r->slots;
    header->skipped = r->skipped;
    header->ok = 1;
    _exit(0);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status)) {
    std::fprintf(stderr, "memd-replay: the child reading %s failed\n", path);
    return false;
  }
  if (bytes != 0) munmap(const_cast<char*>(text), bytes);
  if (!header->ok) {
    std::fprintf(stderr, "memd-replay: %s: %s\n", path, header->error);
    return false;
  }
  *out = Loaded{ops, header->count, static_cast<uint32_t>(header->slots), header->skipped};
  return true;
}

// Where the replay's calls go: malloc, or vmalloc regions.
class Calls {
 public:
  // From MEMD_REPLAY_REGION; false (reported) if it names no method or a
  // region cannot be opened.
  bool init(const Loaded& replay) {
    const char* m = std::getenv("MEMD_REPLAY_REGION");
    if (m == nullptr || *m == '\0') return true;
    Vmethod_t* method = std::strcmp(m, "best") == 0   ? Vmbest
                        : std::strcmp(m, "pool") == 0 ? Vmbest
                        : std::strcmp(m, "last") == 0 ? Vmlast
                                                      : nullptr;
    if (method == nullptr) {
      std::fprintf(stderr, "memd-replay: MEMD_REPLAY_REGION=%s: takes best, pool or last\n", m);
      return false;
    }
    disc_ = *Vmdcheap;
    disc_.max_bytes = size_t{16} << 30;
    main_ = vmopen(&disc_, method, 0);
    last_ = method == Vmlast;
    if (std::strcmp(m, "pool") == 0) {
      pool_size_ = most_frequent_size(replay);
      pool_ = vmopen(&disc_, Vmpool, 0);
      if (pool_ == nullptr) main_ = nullptr;
    }
    if (main_ == nullptr) {
      std::fprintf(stderr, "memd-replay: cannot open a %s region: %s\n", m, std::strerror(errno));
      return false;
    }
    if (pool_ != nullptr) {
      in_pool_ = static_cast<uint8_t*>(map_anonymous(replay.slots + size_t{1}, MAP_PRIVATE));
      if (in_pool_ == nullptr) return false;
      std::memset(in_pool_, 0, replay.slots + size_t{1});
    }
    return true;
  }

  // Live blocks the regions count (vmstat), -1 for malloc and Vmlast
  // (which counts bytes, not blocks).
  long long region_busy() const {
    if (main_ == nullptr || last_) return -1;
    long long busy = 0;
    for (Vmalloc_t* vm : {main_, pool_}) {
      Vmstat_t st;
      if (vm != nullptr && vmstat(vm, &st) == 0) busy += st.n_busy;
    }
    return busy;
  }

  char* alloc(uint32_t slot, size_t size) {
    if (main_ == nullptr) return static_cast<char*>(std::malloc(size));
    bool pooled = pool_ != nullptr && size == pool_size_;
    if (pool_ != nullptr) in_pool_[slot] = pooled;
    return static_cast<char*>(vmalloc(pooled ? pool_ : main_, size));
  }

  void free(uint32_t slot, char* p) {
    if (main_ == nullptr) return std::free(p);
    if (p != nullptr) vmfree(pool_ != nullptr && in_pool_[slot] ? pool_ : main_, p);
  }

  char* resize(uint32_t slot, char* p, size_t size) {
    if (main_ == nullptr) return static_cast<char*>(std::realloc(p, size));
    if (p == nullptr) return alloc(slot, size);
    if (pool_ == nullptr || !in_pool_[slot]) return static_cast<char*>(vmresize(main_, p, size, VM_RSMOVE | VM_RSCOPY));
    // A pooled block that changes size leaves the pool.
    char* q = static_cast<char*>(vmalloc(main_, size));
    if (q == nullptr) return nullptr;
    std::memcpy(q, p, size < pool_size_ ? size : pool_size_);
    vmfree(pool_, p);
    in_pool_[slot] = 0;
    return q;
  }

 private:
  static size_t most_frequent_size(const Loaded& replay) {
    std::vector<uint64_t> all;
    for (size_t i = 0; i < replay.count; ++i) {
      const memd::replay::ReplayOp& op = replay.ops[i];
      if (op.kind == memd::replay::ReplayOp::kAlloc && op.size != 0) all.push_back(op.size);
    }
    std::sort(all.begin(), all.end());
    uint64_t best = 0, best_count = 0;
    for (size_t i = 0; i < all.size();) {
      size_t j = i;
      while (j < all.size() && all[j] == all[i]) ++j;
      if (j - i > best_count) best = all[i], best_count = j - i;
      i = j;
    }
    return best;
  }

  Vmdisc_t disc_{};
  Vmalloc_t* main_ = nullptr;
  Vmalloc_t* pool_ = nullptr;
  bool last_ = false;
  size_t pool_size_ = 0;
  uint8_t* in_pool_ = nullptr;  // per slot, mapped (no allocator's memory)
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: memd-replay TRACE\n");
    return 2;
  }
  Loaded replay;
  if (!load(argv[1], &replay)) return 1;
  Calls calls;
  if (!calls.init(replay)) return 1;
  // Slots in mapped memory, and every page of the calls read once: both
  // are in the resident memory before the first call.
  auto** slots = static_cast<char**>(map_anonymous((replay.slots + size_t{1}) * sizeof(char*), MAP_PRIVATE));
  if (slots == nullptr) return 1;
  std::memset(slots, 0, (replay.slots + size_t{1}) * sizeof(char*));
  uint64_t sum = 0;
  for (size_t k = 0; k < replay.count; k += 4096 / sizeof *replay.ops) sum += replay.ops[k].size;
  asm volatile("" : : "r"(sum));
  uint64_t allocs = 0, frees = 0, resizes = 0, failed = 0;
  long base = resident_kib(), peak = base;
  double start = now_seconds();
  size_t i = 0;
  for (size_t k = 0; k < replay.count; ++k) {
    const memd::replay::ReplayOp& op = replay.ops[k];
    char*& slot = slots[op.slot];
    switch (op.kind) {
      case memd::replay::ReplayOp::kAlloc:
        ++allocs;
        slot = calls.alloc(op.slot, op.size);
        if (slot != nullptr) touch(slot, op.size);
        else if (op.size != 0) ++failed;
        break;
      case memd::replay::ReplayOp::kFree:
        ++frees;
        calls.free(op.slot, slot);
        slot = nullptr;
        break;
      case memd::replay::ReplayOp::kResize: {
        ++resizes;
        char* p = calls.resize(op.slot, slot, op.size);
        if (p != nullptr || op.size == 0) slot = p;
        else ++failed;
        if (p != nullptr) touch(p, op.size);
        break;
      }
    }
    if ((++i & 1023) == 0) {
      long r = resident_kib();
      if (r > peak) peak = r;
    }
  }
  double seconds = now_seconds() - start;
  long r = resident_kib();
  if (r > peak) peak = r;
  // The final state: blocks the trace left live, and (in regions that
  // count them) what the regions hold; -1 where they do not count.
  uint64_t live = 0;
  for (uint32_t k = 0; k < replay.slots; ++k) live += slots[k] != nullptr;
  std::printf("ops=%zu allocs=%llu frees=%llu resizes=%llu skipped=%llu failed=%llu seconds=%.6f base_kib=%ld peak_kib=%ld"
              " live=%llu region_busy=%lld\n",
              replay.count, static_cast<unsigned long long>(allocs), static_cast<unsigned long long>(frees),
              static_cast<unsigned long long>(resizes), static_cast<unsigned long long>(replay.skipped),
              static_cast<unsigned long long>(failed), seconds, base, peak, static_cast<unsigned long long>(live),
              calls.region_busy());
  return 0;
}
