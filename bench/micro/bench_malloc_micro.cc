// Microbenchmarks of the malloc/free fast paths, by request size.
//
// Like the workloads, this binary links no allocator of its own: run it plain
// for glibc or under LD_PRELOAD for a peer (run_all.py does both).
//
//   BM_pair/<size>   one malloc immediately followed by its free — the best
//                    case for a thread cache, one time unit = one pair
//   BM_batch/<size>  kBatch mallocs, then all the frees — the cache has to
//                    hand out and take back many blocks; reported per pair
//                    via the pairs_per_iter counter
//   BM_size_cycle/<size>  BM_batch's pattern for 8 sizes in turn, from <size>
//                    up in 8-byte steps: each size's blocks empty just as
//                    the next size needs blocks of its own (a program
//                    working through phases of different small objects);
//                    reported per pair
#include <benchmark/benchmark.h>

#include <cstdlib>

namespace {

constexpr int kBatch = 512;

// Writing a byte keeps the compiler from pairing away malloc/free and makes
// the allocator's block header (if any) and the first line really used.
void BM_pair(benchmark::State& state) {
  const auto size = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    auto* p = static_cast<char*>(std::malloc(size));
    benchmark::DoNotOptimize(p);
    p[0] = 1;
    std::free(p);
    benchmark::ClobberMemory();
  }
  state.counters["pairs_per_iter"] = 1;
}

// kBatch objects of `size` allocated (each first byte written), then freed.
void batch_of(size_t size, char* (&ptrs)[kBatch]) {
  for (auto& p : ptrs) {
    p = static_cast<char*>(std::malloc(size));
    benchmark::DoNotOptimize(p);
    p[0] = 1;
  }
  for (auto* p : ptrs) std::free(p);
}

void BM_batch(benchmark::State& state) {
  const auto size = static_cast<size_t>(state.range(0));
  char* ptrs[kBatch];
  for (auto _ : state) {
    batch_of(size, ptrs);
    benchmark::ClobberMemory();
  }
  state.counters["pairs_per_iter"] = kBatch;
}

void BM_size_cycle(benchmark::State& state) {
  constexpr int kSizes = 8;
  const auto first = static_cast<size_t>(state.range(0));
  char* ptrs[kBatch];
  for (auto _ : state) {
    for (int k = 0; k < kSizes; ++k) batch_of(first + 8 * static_cast<size_t>(k), ptrs);
    benchmark::ClobberMemory();
  }
  state.counters["pairs_per_iter"] = kBatch * kSizes;
}

void sizes(benchmark::internal::Benchmark* b) {
  for (long s : {8L, 16L, 32L, 64L, 128L, 256L, 512L, 1L << 10, 4L << 10, 16L << 10, 64L << 10, 256L << 10, 1L << 20})
    b->Arg(s);
}

}  // namespace

BENCHMARK(BM_pair)->Apply(sizes);
BENCHMARK(BM_batch)->Apply(sizes);
// 64-120 B: classes whose blocks are one page each.
BENCHMARK(BM_size_cycle)->Arg(64);

BENCHMARK_MAIN();
