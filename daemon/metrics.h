// /metrics: the daemon's Prometheus endpoint (docs/metrics.md lists every
// metric). Every scrape builds the metrics afresh from the daemon's state,
// the regions themselves and what clients reported, so nothing is stale and
// a series goes when its region or client goes.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/services.h"

namespace prometheus {
class Exposer;
}

namespace memd::daemon {

class MetricsServer {
 public:
  // Serves /metrics at `address` (host:port; port 0 picks one).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> start(const std::string& address, DaemonState* state);
  ~MetricsServer();

  const std::string& bound_address() const { return bound_; }

  // Scrapes from now on get nothing (the daemon's state is going away).
  // The HTTP server itself takes over a second to stop (its poll timeout):
  // `stop_in_background` hands it to a thread of its own, so that shutting
  // the daemon down does not wait for it.
  void stop_collecting();
  static void stop_in_background(std::unique_ptr<MetricsServer> server);

 private:
  MetricsServer() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<class MetricsCollector> collector_;
  std::string bound_;
};

// Whether the object at `offset` of the served region is still allocated
// (for samples whose free another process made).
bool region_object_live(DaemonState* state, const std::string& region, uint64_t offset);

}  // namespace memd::daemon
