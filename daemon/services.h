// The gRPC services of memd (proto/memd/v1/memd.proto), thin layers over the
// session table and the region registry. Every handler checks its session
// against the connection's credentials, turns absl::Status into a gRPC
// status with the same code and message, and counts what it did.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "daemon/config.h"
#include "daemon/peer.h"
#include "daemon/region_registry.h"
#include "daemon/rpc_stats.h"
#include "daemon/sessions.h"
#include "daemon/telemetry_store.h"
#include "memd/v1/memd.grpc.pb.h"

namespace memd::daemon {

// What the services share.
struct DaemonState {
  const DaemonConfig* config = nullptr;
  PeerTable* peers = nullptr;
  RegionRegistry* regions = nullptr;
  SessionTable* sessions = nullptr;
  std::string daemon_id;
  uint64_t started_ms = 0;
  std::atomic<uint64_t> rpcs{0};
  std::atomic<uint64_t> rpc_errors{0};
  RpcStats rpc_stats;
  TelemetryStore* telemetry = nullptr;
  std::string metrics_address;  // bound; empty: not served
};

// Same code, same message.
inline grpc::Status to_grpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

class SessionService final : public v1::Sessions::Service {
 public:
  explicit SessionService(DaemonState* state) : state_(state) {}
  grpc::Status Open(grpc::ServerContext* context,
                    grpc::ServerReaderWriter<v1::SessionEvent, v1::SessionRequest>* stream) override;

 private:
  DaemonState* state_;
};

class RegionService final : public v1::Regions::Service {
 public:
  explicit RegionService(DaemonState* state) : state_(state) {}
  grpc::Status Open(grpc::ServerContext* c, const v1::OpenRegionRequest* req, v1::OpenRegionResponse* resp) override;
  grpc::Status Close(grpc::ServerContext* c, const v1::CloseRegionRequest* req, v1::CloseRegionResponse* resp) override;
  grpc::Status List(grpc::ServerContext* c, const v1::ListRegionsRequest* req, v1::ListRegionsResponse* resp) override;
  grpc::Status Stat(grpc::ServerContext* c, const v1::StatRegionRequest* req, v1::RegionInfo* resp) override;
  grpc::Status Remove(grpc::ServerContext* c, const v1::RemoveRegionRequest* req, v1::RemoveRegionResponse* resp) override;

 private:
  DaemonState* state_;
};

class LeaseRpcService final : public v1::Leases::Service {
 public:
  explicit LeaseRpcService(DaemonState* state) : state_(state) {}
  grpc::Status Lease(grpc::ServerContext* c, const v1::LeaseRequest* req, v1::LeaseResponse* resp) override;
  grpc::Status Release(grpc::ServerContext* c, const v1::ReleaseRequest* req, v1::ReleaseResponse* resp) override;
  grpc::Status LeaseRun(grpc::ServerContext* c, const v1::LeaseRunRequest* req, v1::LeaseRunResponse* resp) override;
  grpc::Status ReleaseRun(grpc::ServerContext* c, const v1::ReleaseRunRequest* req, v1::ReleaseRunResponse* resp) override;
  grpc::Status ResizeRun(grpc::ServerContext* c, const v1::ResizeRunRequest* req, v1::ResizeRunResponse* resp) override;

 private:
  DaemonState* state_;
};

class AdminService final : public v1::Admin::Service {
 public:
  explicit AdminService(DaemonState* state) : state_(state) {}
  grpc::Status Check(grpc::ServerContext* c, const v1::CheckRequest* req, v1::CheckResponse* resp) override;
  grpc::Status Compact(grpc::ServerContext* c, const v1::CompactRequest* req, v1::CompactResponse* resp) override;
  grpc::Status Drain(grpc::ServerContext* c, const v1::DrainRequest* req, v1::DrainResponse* resp) override;
  grpc::Status ListClients(grpc::ServerContext* c, const v1::ListClientsRequest* req,
                           v1::ListClientsResponse* resp) override;
  grpc::Status Stats(grpc::ServerContext* c, const v1::StatsRequest* req, v1::StatsResponse* resp) override;
  grpc::Status Profile(grpc::ServerContext* c, const v1::ProfileRequest* req, v1::ProfileResponse* resp) override;

 private:
  DaemonState* state_;
};

// Fills a RegionInfo (walks the region: exact when no client allocates).
void describe_region(ServedRegion& r, v1::RegionInfo* out);

}  // namespace memd::daemon
