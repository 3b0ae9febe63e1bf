#include "daemon/rpc_stats.h"

#include <cstring>

#include "proto/grpc_status_name.h"

namespace memd::daemon {

void LatencyHistogram::observe(double seconds) {
  size_t i = 0;
  while (i < kLatencyBuckets.size() && seconds > kLatencyBuckets[i]) ++i;
  counts[i].fetch_add(1, std::memory_order_relaxed);
  sum_ns.fetch_add(static_cast<uint64_t>(seconds * 1e9), std::memory_order_relaxed);
  count.fetch_add(1, std::memory_order_relaxed);
}

void RpcStats::record(const char* method, grpc::StatusCode code) {
  std::lock_guard<std::mutex> g(mu_);
  ++calls_[{method, code}];
}

void RpcStats::observe_lease(const char* method, double seconds) {
  for (size_t i = 0; i < std::size(kLeaseMethods); ++i) {
    if (std::strcmp(method, kLeaseMethods[i]) == 0) {
      lease_[i].observe(seconds);
      return;
    }
  }
}

std::vector<std::pair<std::pair<std::string, std::string>, uint64_t>> RpcStats::calls() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<std::pair<std::pair<std::string, std::string>, uint64_t>> out;
  for (const auto& [key, n] : calls_) out.push_back({{key.first, grpc_status_name(key.second)}, n});
  return out;
}

std::vector<RpcStats::LatencyView> RpcStats::lease_latency() const {
  std::vector<LatencyView> out;
  for (size_t i = 0; i < std::size(kLeaseMethods); ++i) {
    LatencyView v;
    v.method = kLeaseMethods[i];
    for (size_t b = 0; b < v.counts.size(); ++b) v.counts[b] = lease_[i].counts[b].load(std::memory_order_relaxed);
    v.sum_seconds = static_cast<double>(lease_[i].sum_ns.load(std::memory_order_relaxed)) / 1e9;
    v.count = lease_[i].count.load(std::memory_order_relaxed);
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace memd::daemon
