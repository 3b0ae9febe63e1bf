// Fresh memory put to use: what a page fault per page costs, and what
// populating a block or run in one call (MEMD_PREFAULT) or huge pages
// (MEMD_THP) save. One process, fresh pages only (nothing freed before the
// end, so no allocator can reuse warm pages). Workloads:
//   arrays MIB    MIB of 4 MiB arrays, each allocated and written in full
//                 (a loader, a matrix, a buffer pool filling up)
//   objects MIB   MIB of 64-byte objects, each allocated and its first 16
//                 bytes written (a graph or index being built)
// Prints "ns_per_page=<x>" (time over the pages the workload fills).
//
//   bench_prefault malloc WORKLOAD MIB   (the allocator comes by LD_PRELOAD)
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

constexpr size_t kArray = size_t{4} << 20;
constexpr size_t kObject = 64;

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 || std::strcmp(argv[1], "malloc") != 0) {
    std::fprintf(stderr, "usage: bench_prefault malloc arrays|objects MIB\n");
    return 2;
  }
  std::string workload = argv[2];
  size_t bytes = std::strtoull(argv[3], nullptr, 10) << 20;
  std::vector<void*> kept;
  uint64_t check = 0;
  double start = now_s();
  if (workload == "arrays") {
    kept.reserve(bytes / kArray);
    for (size_t done = 0; done < bytes; done += kArray) {
      auto* p = static_cast<unsigned char*>(std::malloc(kArray));
      if (p == nullptr) return 1;
      std::memset(p, static_cast<int>(done >> 20) | 1, kArray);
      check += p[kArray - 1];
      kept.push_back(p);
    }
  } else if (workload == "objects") {
    kept.reserve(bytes / kObject);
    for (size_t done = 0; done < bytes; done += kObject) {
      auto* p = static_cast<uint64_t*>(std::malloc(kObject));
      if (p == nullptr) return 1;
      p[0] = done;
      p[1] = check;
      check += done & 1;
      kept.push_back(p);
    }
  } else {
    std::fprintf(stderr, "bench_prefault: unknown workload %s\n", workload.c_str());
    return 2;
  }
  double elapsed = now_s() - start;
  for (void* p : kept) std::free(p);
  std::printf("ns_per_page=%.1f check=%llu\n", elapsed * 1e9 / static_cast<double>(bytes >> 12),
              static_cast<unsigned long long>(check));
  return 0;
}
