// The daemon's Unix socket: an accept loop of its own in front of gRPC.
// gRPC 1.51 cannot tell a handler who connected, so each accepted socket's
// SO_PEERCRED goes into the PeerTable before the socket (non-blocking, as
// gRPC's poller requires) is given to the server. One daemon per socket: a
// lock file beside it keeps a second one out, and a stale socket left by a
// crash is replaced.
//
// Under socket activation systemd binds the socket and passes it in
// (`activated_fd`); memd then neither binds nor removes it, so connections
// made while memd restarts wait in its backlog instead of being refused.
//
// The loop also keeps connections in bounds: the PeerTable refuses a uid
// beyond its connection limit (the socket is closed at once) and is swept
// here for connections that made no call in time or have gone idle; and at
// the descriptor limit (EMFILE) the loop stops accepting for a while,
// doubling the pause up to a second, instead of spinning on a socket that
// stays readable.
#pragma once

#include <grpcpp/server.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "daemon/peer.h"
#include "daemon/throttled_log.h"

namespace memd::daemon {

class Listener {
 public:
  // `activated_fd`: a listening socket bound to `path` by the service
  // manager (the Listener owns it), or -1 to bind `path` with `mode`.
  static absl::StatusOr<std::unique_ptr<Listener>> start(const std::string& path, uint32_t mode, int activated_fd,
                                                         grpc::Server* server, PeerTable* peers);
  ~Listener();  // stop()

  // Stops accepting and removes the socket, so that a client connecting
  // from now on is refused at once instead of waiting in the backlog
  // (existing connections go on). An activated socket stays: systemd
  // holds it, and its backlog waits for the next memd.
  void stop();

 private:
  using Clock = std::chrono::steady_clock;
  Listener() = default;
  void run();
  // Accepts what is pending; at the descriptor limit, pauses accepting.
  void accept_pending();
  // Hands an accepted connection to gRPC (or refuses it: closed); false if
  // there is no descriptor for its watch yet (the caller holds it).
  bool take(int fd);
  void pause_accepting(int error);

  std::string path_;
  int listen_fd_ = -1;
  bool bound_here_ = false;  // ours to remove at stop (not systemd's)
  int lock_fd_ = -1;
  int wake_fd_ = -1;
  grpc::Server* server_ = nullptr;
  PeerTable* peers_ = nullptr;
  std::thread thread_;
  // Touched by the loop's thread only.
  int held_fd_ = -1;             // accepted, waiting for a descriptor for its watch
  Clock::duration pause_{};      // zero: accepting normally
  Clock::time_point resume_at_{};
  ThrottledWarning accept_failed_;
  ThrottledWarning refused_;
  ThrottledWarning silent_;
  ThrottledWarning idle_;
};

}  // namespace memd::daemon
