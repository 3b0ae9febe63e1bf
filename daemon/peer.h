// Who is on the other end of a client connection, and whether it is still
// there. The daemon accepts each connection itself, reads SO_PEERCRED (the
// kernel's word, not the client's), and only then hands the socket to gRPC,
// which names the connection "fd:<n>" in ServerContext::peer(). The table
// maps that name back to the credentials.
//
// gRPC owns the descriptor from then on and closes it when it likes, after
// which the kernel hands the same number to the next socket. So the table
// keeps a duplicate of each socket (its "watch"): the daemon's own handle on
// the connection, which no one else closes or reuses. gRPC shuts a socket
// down before it closes it, and a peer that goes away shuts it down too;
// either way the watch polls POLLHUP and the connection is forgotten. The
// watch is also how a silent connection is ended: shutdown() on it, and
// gRPC sees end of file on its own descriptor and closes it.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace memd::daemon {

struct Peer {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

struct ConnectionLimits {
  uint32_t per_uid = 0;  // connections one uid may have open; 0: no limit; root has none
  // A connection that has made no call this long after it was accepted is
  // shut down; zero: never.
  std::chrono::steady_clock::duration handshake_timeout{};
};

class PeerTable {
 public:
  using Clock = std::chrono::steady_clock;

  explicit PeerTable(const ConnectionLimits& limits = {}) : limits_(limits) {}
  ~PeerTable();  // closes every watch

  // A new connection on `fd`, before gRPC has it; `watch` is a duplicate of
  // `fd` that the table owns from now on. A previous connection on the same
  // number has ended (the kernel reuses a number only after it is closed).
  // RESOURCE_EXHAUSTED naming max-connections-per-uid if the peer's uid has
  // as many open already; the caller then keeps (and closes) both.
  absl::Status add(int fd, int watch, const Peer& peer);
  // The credentials of a gRPC peer name ("fd:12"); nothing if unknown. A
  // connection asked about has made a call: it is past its handshake.
  std::optional<Peer> find(std::string_view grpc_peer) const;

  // Housekeeping, on the listener's thread. Forgets connections whose watch
  // has hung up and shuts down those that made no call by their deadline;
  // returns how many it shut down, and the next deadline in `next` (max()
  // if none).
  size_t sweep(Clock::time_point now, Clock::time_point* next);
  // Appends every watch, to be polled for a hang-up (events 0: POLLHUP and
  // POLLERR are always reported).
  void append_watches(std::vector<pollfd>* fds) const;

  size_t size() const;

 private:
  struct Connection {
    Peer peer;
    int watch = -1;                // owned
    Clock::time_point deadline;    // for its first call
    mutable bool spoke = false;    // a call has come on it
  };
  void forget_locked(std::map<int, Connection>::iterator it);

  const ConnectionLimits limits_;
  mutable std::mutex mu_;
  std::map<int, Connection> by_fd_;  // by gRPC's descriptor
  std::map<uid_t, uint32_t> per_uid_;
};

}  // namespace memd::daemon
