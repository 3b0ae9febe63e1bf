// bench_malloc_micro's loops, run by two threads at once: each thread heap
// keeps its own counters and sampling countdown, and two heaps busy at the
// same time must not slow each other down through them. And, one thread,
// big objects filled before they are freed: sampling costs the same per
// byte allocated, whatever is done with the bytes, so a pair that only
// touches one byte of 64 KiB shows its cost at its largest and a pair that
// writes them all shows it beside the use a program makes of the memory.
//
// run_telemetry.py compiles this file (CMake does not) with the flags of
// the release build; like bench_malloc_micro it links no allocator, and the
// cases are the very same functions. Google Benchmark reports real_time as
// wall time over the iterations of both threads, i.e. per pair of the two
// threads together.
#include "bench/micro/bench_malloc_micro.cc"

#include <cstring>

namespace {

void BM_fill(benchmark::State& state) {
  const auto size = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    auto* p = static_cast<char*>(std::malloc(size));
    benchmark::DoNotOptimize(p);
    std::memset(p, 1, size);
    benchmark::ClobberMemory();  // else the stores, dead at the free, go
    std::free(p);
    benchmark::ClobberMemory();
  }
  state.counters["pairs_per_iter"] = 1;
}

}  // namespace

BENCHMARK(BM_fill)->Arg(64 << 10)->Arg(1 << 20);

BENCHMARK(BM_pair)->Arg(16)->Arg(64)->Arg(256)->Threads(2)->UseRealTime();
BENCHMARK(BM_batch)->Arg(16)->Arg(64)->Arg(256)->Threads(2)->UseRealTime();
