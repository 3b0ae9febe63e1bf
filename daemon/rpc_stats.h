// What the daemon's RPCs did, for /metrics: calls by method and status code,
// and the time lease RPCs took, in a fixed-bucket histogram (the buckets a
// lease round trip spans: 10 µs to 1 s). Cheap enough for every call: a
// short lock on a small map, and atomic adds.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

namespace memd::daemon {

inline constexpr std::array<double, 14> kLatencyBuckets = {1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3,
                                                           2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.25, 1.0};

struct LatencyHistogram {
  std::array<std::atomic<uint64_t>, kLatencyBuckets.size() + 1> counts{};  // last: +Inf
  std::atomic<uint64_t> sum_ns{0};
  std::atomic<uint64_t> count{0};
  void observe(double seconds);
};

class RpcStats {
 public:
  void record(const char* method, grpc::StatusCode code);
  // Lease, Release, LeaseRun, ReleaseRun, ResizeRun; other names are ignored.
  void observe_lease(const char* method, double seconds);

  std::vector<std::pair<std::pair<std::string, std::string>, uint64_t>> calls() const;
  struct LatencyView {
    std::string method;
    std::array<uint64_t, kLatencyBuckets.size() + 1> counts;
    double sum_seconds;
    uint64_t count;
  };
  std::vector<LatencyView> lease_latency() const;

 private:
  static constexpr const char* kLeaseMethods[] = {"Lease", "Release", "LeaseRun", "ReleaseRun", "ResizeRun"};
  mutable std::mutex mu_;
  std::map<std::pair<std::string, grpc::StatusCode>, uint64_t> calls_;
  LatencyHistogram lease_[std::size(kLeaseMethods)];
};

}  // namespace memd::daemon
