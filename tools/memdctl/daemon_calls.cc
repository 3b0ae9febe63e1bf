#include "tools/memdctl/daemon_calls.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace memd::memdctl {

SocketState probe_socket(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return SocketState::kMissing;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path) return SocketState::kPathTooLong;
  std::memcpy(address.sun_path, path.data(), path.size());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return SocketState::kNotListening;
  int result = connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address);
  int error = errno;
  close(fd);
  if (result == 0) return SocketState::kAnswers;
  if (error == EACCES || error == EPERM) return SocketState::kNoAccess;
  return SocketState::kNotListening;
}

DaemonCalls::DaemonCalls(const std::string& socket, std::chrono::milliseconds timeout) : timeout_(timeout) {
  grpc::ChannelArguments arguments;
  // A heap profile may pass gRPC's default 4 MiB answer limit; the daemon
  // is local and trusted.
  arguments.SetMaxReceiveMessageSize(-1);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel("unix:" + socket, grpc::InsecureChannelCredentials(), arguments);
  regions_ = v1::Regions::NewStub(channel);
  admin_ = v1::Admin::NewStub(channel);
  health_ = grpc::health::v1::Health::NewStub(channel);
}

void DaemonCalls::set_deadline(grpc::ClientContext* context) const {
  context->set_deadline(std::chrono::system_clock::now() + timeout_);
}

grpc::Status DaemonCalls::list_regions(v1::ListRegionsResponse* out) {
  grpc::ClientContext context;
  set_deadline(&context);
  return regions_->List(&context, v1::ListRegionsRequest(), out);
}

grpc::Status DaemonCalls::stat_region(const std::string& name, v1::RegionInfo* out) {
  grpc::ClientContext context;
  set_deadline(&context);
  v1::StatRegionRequest request;
  request.set_name(name);
  return regions_->Stat(&context, request, out);
}

grpc::Status DaemonCalls::remove_region(const std::string& name, v1::RemoveRegionResponse* out) {
  grpc::ClientContext context;
  set_deadline(&context);
  v1::RemoveRegionRequest request;
  request.set_session(0);
  request.set_name(name);
  return regions_->Remove(&context, request, out);
}

grpc::Status DaemonCalls::check(const std::string& region, v1::CheckResponse* out) {
  grpc::ClientContext context;
  set_deadline(&context);
  v1::CheckRequest request;
  request.set_region(region);
  return admin_->Check(&context, request, out);
}

grpc::Status DaemonCalls::compact(const std::string& region, v1::CompactResponse* out) {
  grpc::ClientContext context;
  set_deadline(&context);
  v1::CompactRequest request;
  request.set_region(region);
  return admin_->Compact(&context, request, out);
}

grpc::Status DaemonCalls::drain(int32_t pid, const std::string& region, v1::DrainResponse* out) {
  grpc::ClientContext context;
  set_deadline(&context);
  v1::DrainRequest request;
  request.set_pid(pid);
  request.set_region(region);
  return admin_->Drain(&context, request, out);
}

grpc::Status DaemonCalls::list_clients(v1::ListClientsResponse* out) {
  grpc::ClientContext context;
  set_deadline(&context);
  return admin_->ListClients(&context, v1::ListClientsRequest(), out);
}

grpc::Status DaemonCalls::stats(v1::StatsResponse* out) {
  grpc::ClientContext context;
  set_deadline(&context);
  return admin_->Stats(&context, v1::StatsRequest(), out);
}

grpc::Status DaemonCalls::profile(const std::string& region, int32_t pid, v1::ProfileResponse* out) {
  grpc::ClientContext context;
  set_deadline(&context);
  v1::ProfileRequest request;
  request.set_region(region);
  request.set_pid(pid);
  return admin_->Profile(&context, request, out);
}

grpc::Status DaemonCalls::health(grpc::health::v1::HealthCheckResponse* out) {
  grpc::ClientContext context;
  set_deadline(&context);
  return health_->Check(&context, grpc::health::v1::HealthCheckRequest(), out);
}

}  // namespace memd::memdctl
