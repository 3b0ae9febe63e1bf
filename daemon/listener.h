// The daemon's Unix socket: an accept loop of its own in front of gRPC.
// gRPC 1.51 cannot tell a handler who connected, so each accepted socket's
// SO_PEERCRED goes into the PeerTable before the socket (non-blocking, as
// gRPC's poller requires) is given to the server. One daemon per socket: a
// lock file beside it keeps a second one out, and a stale socket left by a
// crash is replaced.
#pragma once

#include <grpcpp/server.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "daemon/peer.h"

namespace memd::daemon {

class Listener {
 public:
  static absl::StatusOr<std::unique_ptr<Listener>> start(const std::string& path, uint32_t mode,
                                                         grpc::Server* server, PeerTable* peers);
  ~Listener();  // stops accepting and removes the socket file

  // Stops accepting new connections (existing ones go on).
  void stop();

 private:
  Listener() = default;
  void run();

  std::string path_;
  int listen_fd_ = -1;
  int lock_fd_ = -1;
  int wake_fd_ = -1;
  grpc::Server* server_ = nullptr;
  PeerTable* peers_ = nullptr;
  std::thread thread_;
};

}  // namespace memd::daemon
