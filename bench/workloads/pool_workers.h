// Running a workload whose threads each churn a pool of their own objects
// (wl_random_sizes, wl_one_size): one worker per thread, on the main thread
// when there is just one (a plain single-threaded program), and one report of
// all of them.
#pragma once

#include <thread>
#include <vector>

#include "common.h"

namespace wl {

// Runs work(workers[t], seed + t, ops) for each of args.threads workers and
// reports the mix of their hashes and the sum of their peaks (their pools
// stay full, so the per-thread peaks coincide). Worker has `hash` and
// `live` (a LiveBytes).
template <class Worker, class Work>
void run_pool_workers(const Args& args, uint64_t seed, uint64_t ops, Work work) {
  std::vector<Worker> workers(args.threads);
  if (args.threads == 1) {
    work(workers[0], seed, ops);
  } else {
    std::vector<std::thread> threads;
    for (int t = 0; t < args.threads; ++t) {
      threads.emplace_back([&workers, &work, t, seed, ops] { work(workers[t], seed + t, ops); });
    }
    for (auto& th : threads) th.join();
  }
  uint64_t checksum = 0;
  size_t peak = 0;
  for (Worker& w : workers) {
    checksum = mix(checksum, w.hash);
    peak += w.live.peak();
  }
  report(checksum, peak);
}

}  // namespace wl
