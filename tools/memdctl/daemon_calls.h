// The calls memdctl makes to memd: the Admin and Regions services over the
// daemon's Unix socket, each with the same deadline. None of them needs a
// session: the daemon knows the caller by the socket's credentials.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "grpc/health/v1/health.grpc.pb.h"
#include "memd/v1/memd.grpc.pb.h"

namespace memd::memdctl {

// Whether anything listens at the socket, found before any call so that a
// daemon that is not running is told apart from one that fails a call.
enum class SocketState {
  kAnswers,
  kMissing,       // no such file, or not a socket
  kNotListening,  // a socket file nobody accepts on (left by a crashed daemon)
  kNoAccess,      // the socket's permissions keep this user out
  kPathTooLong,   // longer than a Unix socket address holds
};

SocketState probe_socket(const std::string& path);

class DaemonCalls {
 public:
  DaemonCalls(const std::string& socket, std::chrono::milliseconds timeout);

  grpc::Status list_regions(v1::ListRegionsResponse* out);
  grpc::Status stat_region(const std::string& name, v1::RegionInfo* out);
  // Without a session: the daemon acts for the caller's uid.
  grpc::Status remove_region(const std::string& name, v1::RemoveRegionResponse* out);
  grpc::Status check(const std::string& region, v1::CheckResponse* out);
  grpc::Status compact(const std::string& region, v1::CompactResponse* out);
  grpc::Status drain(int32_t pid, const std::string& region, v1::DrainResponse* out);
  grpc::Status list_clients(v1::ListClientsResponse* out);
  grpc::Status stats(v1::StatsResponse* out);
  // A region's heap profile ("(process)": process heaps), of one client or
  // (pid 0) of every client.
  grpc::Status profile(const std::string& region, int32_t pid, v1::ProfileResponse* out);
  grpc::Status health(grpc::health::v1::HealthCheckResponse* out);

 private:
  void set_deadline(grpc::ClientContext* context) const;

  std::chrono::milliseconds timeout_;
  std::unique_ptr<v1::Regions::Stub> regions_;
  std::unique_ptr<v1::Admin::Stub> admin_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
};

}  // namespace memd::memdctl
