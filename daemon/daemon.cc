#include "daemon/daemon.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <time.h>
#include <unistd.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "daemon/clock.h"
#include "daemon/log.h"
#include "daemon/systemd.h"
#include "disciplines/fault_guard.h"
#include "heap/region_format.h"

namespace memd::daemon {
namespace {

ConnectionLimits connection_limits(const DaemonConfig& c) {
  ConnectionLimits l;
  l.per_uid = c.max_connections_per_uid;
  l.handshake_timeout = std::chrono::seconds(c.handshake_timeout_s);
  l.idle_timeout = std::chrono::seconds(c.idle_timeout_s);
  return l;
}

}  // namespace

Daemon::Daemon(const DaemonConfig& config)
    : config_(config), catalog_(config.data_dir), peers_(connection_limits(config_)), regions_(config_, &catalog_) {}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::start(const DaemonConfig& config, int activated_socket) {
  std::unique_ptr<Daemon> d(new Daemon(config));
  if (absl::Status s = d->catalog_.init(); !s.ok()) return s;
  d->sessions_ = std::make_unique<SessionTable>(d->config_, &d->regions_);
  d->state_.config = &d->config_;
  d->state_.peers = &d->peers_;
  d->state_.regions = &d->regions_;
  d->state_.sessions = d->sessions_.get();
  d->state_.daemon_id = absl::StrCat(getpid(), "-", absl::Hex(heap::random_secret()));
  d->state_.started_ms = wall_ms();
  d->state_.telemetry = &d->telemetry_;

  // Any user who can write a region's object can truncate it: a fault on
  // a page it no longer backs damages that region, not the daemon.
  if (absl::Status s = disciplines::install_fault_guard(); !s.ok()) return s;
  std::vector<KeptLease> kept;
  d->regions_.load_all(&kept);
  d->sessions_->adopt_orphans(kept);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  d->session_service_ = std::make_unique<SessionService>(&d->state_);
  d->region_service_ = std::make_unique<RegionService>(&d->state_);
  d->lease_service_ = std::make_unique<LeaseRpcService>(&d->state_);
  d->admin_service_ = std::make_unique<AdminService>(&d->state_);
  builder.RegisterService(d->session_service_.get());
  builder.RegisterService(d->region_service_.get());
  builder.RegisterService(d->lease_service_.get());
  builder.RegisterService(d->admin_service_.get());
  d->server_ = builder.BuildAndStart();
  if (d->server_ == nullptr) return absl::InternalError("gRPC server did not start");
  // Metrics start before the socket accepts anyone: a client's first call
  // may ask where they are (Admin.Stats), and the address is written once,
  // before any thread of the server reads it.
  if (!d->config_.metrics_address.empty()) {
    // Metrics are for operators; a port taken by someone else does not stop
    // the daemon from serving memory.
    absl::StatusOr<std::unique_ptr<MetricsServer>> m = MetricsServer::start(d->config_.metrics_address, &d->state_);
    if (m.ok()) {
      d->metrics_ = std::move(*m);
      d->state_.metrics_address = d->metrics_->bound_address();
      log_info("metrics on ", d->state_.metrics_address, "/metrics");
    } else {
      log_warning("metrics not served: ", m.status().message());
    }
  }
  absl::StatusOr<std::unique_ptr<Listener>> l =
      Listener::start(d->config_.socket_path, d->config_.socket_mode, activated_socket, d->server_.get(), &d->peers_);
  if (!l.ok()) return l.status();  // ~Daemon stops what started
  d->listener_ = std::move(*l);
  log_info("memd ", d->state_.daemon_id, " serving on ", d->config_.socket_path, ", data in ", d->config_.data_dir,
           ", ", d->regions_.list().size(), " region(s), ", kept.size(), " lease(s) kept for running clients",
           activated_socket >= 0 ? " (socket from systemd)" : "");
  // Type=notify: the unit is started (and units ordered after it may run
  // their clients) only now that the socket accepts them.
  if (absl::Status s = notify_service_manager(absl::StrCat("READY=1\nSTATUS=serving on ", d->config_.socket_path,
                                                            "\nMAINPID=", getpid()));
      !s.ok()) {
    log_warning(s.message());
  }
  return d;
}

void Daemon::stop() {
  if (stopped_) return;
  stopped_ = true;
  MetricsServer::stop_in_background(std::move(metrics_));  // no scrape reads a region being closed
  bool serving = listener_ != nullptr;
  // Health first, so that probes and watchers hear it while calls still
  // come through, then no new connection (refused at once, not left in
  // the backlog) and no new session; open sessions' streams end now.
  if (server_ != nullptr && server_->GetHealthCheckService() != nullptr) {
    server_->GetHealthCheckService()->SetServingStatus(false);
  }
  if (serving) {
    log_info("shutting down");
    if (absl::Status s = notify_service_manager("STOPPING=1\nSTATUS=shutting down"); !s.ok()) log_warning(s.message());
    listener_->stop();
  }
  if (sessions_) sessions_->shutting_down();
  if (server_) {
    // Calls in progress finish, up to drain-timeout; then gRPC cancels them.
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(config_.drain_timeout_s));
    server_->Wait();
  }
  listener_.reset();
  // A daemon that never served leaves its regions as it found them (a
  // checkpoint is harmless, but nothing has changed).
  regions_.close_all(serving && config_.checkpoint_on_exit);
  if (serving) log_info("stopped");
}

Daemon::~Daemon() { stop(); }

}  // namespace memd::daemon
