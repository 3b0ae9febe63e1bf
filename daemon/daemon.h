// memd, the daemon: the region registry, the session table and the gRPC
// services, served on a Unix socket through the daemon's own accept loop.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>

#include "absl/status/statusor.h"
#include "daemon/catalog.h"
#include "daemon/config.h"
#include "daemon/listener.h"
#include "daemon/peer.h"
#include "daemon/region_registry.h"
#include "daemon/metrics.h"
#include "daemon/services.h"
#include "daemon/telemetry_store.h"
#include "daemon/sessions.h"

namespace memd::daemon {

class Daemon {
 public:
  // Opens (and recovers) every region of the catalog, then serves.
  // `activated_socket`: the listening socket systemd passed (see
  // daemon/systemd.h), or -1 to bind config.socket_path.
  static absl::StatusOr<std::unique_ptr<Daemon>> start(const DaemonConfig& config, int activated_socket = -1);
  ~Daemon();  // stop()

  // Stops accepting, ends every session (clients keep their leases to
  // resume with the next daemon), checkpoints and closes every region.
  void stop();

 private:
  explicit Daemon(const DaemonConfig& config);

  DaemonConfig config_;
  Catalog catalog_;
  PeerTable peers_;
  RegionRegistry regions_;
  std::unique_ptr<SessionTable> sessions_;
  TelemetryStore telemetry_;
  DaemonState state_;
  std::unique_ptr<SessionService> session_service_;
  std::unique_ptr<RegionService> region_service_;
  std::unique_ptr<LeaseRpcService> lease_service_;
  std::unique_ptr<AdminService> admin_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<MetricsServer> metrics_;
  bool stopped_ = false;
};

}  // namespace memd::daemon
