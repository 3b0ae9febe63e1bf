// bench_malloc_micro's loops, run by two threads at once: each thread heap
// keeps its own counters and sampling countdown, and two heaps busy at the
// same time must not slow each other down through them.
//
// run_telemetry.py compiles this file (CMake does not) with the flags of
// the release build; like bench_malloc_micro it links no allocator, and the
// cases are the very same functions. Google Benchmark reports real_time as
// wall time over the iterations of both threads, i.e. per pair of the two
// threads together.
#include "bench/micro/bench_malloc_micro.cc"

BENCHMARK(BM_pair)->Arg(16)->Arg(64)->Arg(256)->Threads(2)->UseRealTime();
BENCHMARK(BM_batch)->Arg(16)->Arg(64)->Arg(256)->Threads(2)->UseRealTime();
