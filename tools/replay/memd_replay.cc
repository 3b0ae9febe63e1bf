// memd-replay TRACE: replays a trace (docs/trace.md) against whatever malloc
// the process has (LD_PRELOAD picks it; memdctl replay runs it once per
// allocator and method) and prints what it cost, one line:
//
//   ops=N allocs=A frees=F resizes=R skipped=S failed=X seconds=T base_kib=B peak_kib=P
//
// The trace is read and numbered first (tools/replay/trace_format.h); the
// timed part makes only the traced calls, in the trace's order, on one
// thread, writing one byte per page of each new or resized block (so that
// the space is resident, as the traced program's was). Space is the peak of
// the process's resident memory sampled every 1024 calls, over what it was
// before the first call.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

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

bool read_file(const char* path, std::string* out) {
  FILE* f = std::fopen(path, "rb");
  if (f == nullptr) return false;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out->append(buf, n);
  bool ok = !std::ferror(f);
  std::fclose(f);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: memd-replay TRACE\n");
    return 2;
  }
  std::string text;
  if (!read_file(argv[1], &text)) {
    std::fprintf(stderr, "memd-replay: cannot read %s: %s\n", argv[1], std::strerror(errno));
    return 1;
  }
  absl::StatusOr<memd::replay::Replay> replay = memd::replay::read_trace(text);
  if (!replay.ok()) {
    std::fprintf(stderr, "memd-replay: %s: %s\n", argv[1], std::string(replay.status().message()).c_str());
    return 1;
  }
  std::string().swap(text);
  std::vector<char*> slots(replay->slots, nullptr);
  uint64_t allocs = 0, frees = 0, resizes = 0, failed = 0;
  long base = resident_kib(), peak = base;
  double start = now_seconds();
  size_t i = 0;
  for (const memd::replay::ReplayOp& op : replay->ops) {
    char*& slot = slots[op.slot];
    switch (op.kind) {
      case memd::replay::ReplayOp::kAlloc:
        ++allocs;
        slot = static_cast<char*>(std::malloc(op.size));
        if (slot != nullptr) touch(slot, op.size);
        else if (op.size != 0) ++failed;
        break;
      case memd::replay::ReplayOp::kFree:
        ++frees;
        std::free(slot);
        slot = nullptr;
        break;
      case memd::replay::ReplayOp::kResize: {
        ++resizes;
        char* p = static_cast<char*>(std::realloc(slot, op.size));
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
  std::printf("ops=%zu allocs=%llu frees=%llu resizes=%llu skipped=%llu failed=%llu seconds=%.6f base_kib=%ld peak_kib=%ld\n",
              replay->ops.size(), static_cast<unsigned long long>(allocs), static_cast<unsigned long long>(frees),
              static_cast<unsigned long long>(resizes), static_cast<unsigned long long>(replay->skipped),
              static_cast<unsigned long long>(failed), seconds, base, peak);
  return 0;
}
