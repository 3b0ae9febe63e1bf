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
// watch is also how a silent or idle connection is ended: shutdown() on it,
// and gRPC sees end of file on its own descriptor and closes it.
//
// Two deadlines end a connection: one that has made no memd call within
// handshake-timeout of its accept (found by find(): it has "spoken"), and
// one that has spoken but has had no call start or end for idle-timeout
// while no call is in progress (ConnectionCall counts them). A connection
// holding a session stream has a call in progress as long as it lives, so
// libmemd's connection is never idle; one that opened a stream but never
// sent its hello has not spoken, and the handshake deadline still ends it.
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
  // A connection that has made calls, has none in progress and has had
  // none start or end this long is shut down; zero: never.
  std::chrono::steady_clock::duration idle_timeout{};
};

// What a sweep did, and when the next one is due.
struct Swept {
  size_t silent = 0;  // shut down: no call within handshake-timeout
  size_t idle = 0;    // shut down: no call for idle-timeout
  std::chrono::steady_clock::time_point next = std::chrono::steady_clock::time_point::max();  // max(): none due
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

  // One connection for the length of a call on it, even if its descriptor's
  // number is reused meanwhile (a new connection gets a new serial).
  struct ConnectionId {
    int fd = -1;
    uint64_t serial = 0;
  };
  // A call on `grpc_peer`'s connection starts (nothing if the connection is
  // unknown) and ends; ConnectionCall pairs them.
  std::optional<ConnectionId> begin_call(std::string_view grpc_peer);
  void end_call(const ConnectionId& id);

  // Housekeeping, on the listener's thread. Forgets connections whose watch
  // has hung up and shuts down those past a deadline (see the top); says
  // how many, and when to sweep again.
  Swept sweep(Clock::time_point now);
  // Appends every watch, to be polled for a hang-up (events 0: POLLHUP and
  // POLLERR are always reported).
  void append_watches(std::vector<pollfd>* fds) const;

  size_t size() const;  // connections open
  // Connections shut down since the table was made, by reason.
  uint64_t silent_total() const;
  uint64_t idle_total() const;

 private:
  struct Connection {
    Peer peer;
    int watch = -1;                 // owned
    uint64_t serial = 0;            // unique in the table's life
    Clock::time_point accepted;
    Clock::time_point last_call;    // the last start or end of a call on it; accepted before any
    uint32_t calls = 0;             // in progress
    mutable bool spoke = false;     // a call has come on it
    bool shut = false;              // shut down by a sweep; its watch hangs up
  };
  // The earliest time `c` may be shut down if nothing happens meanwhile,
  // or sooner, a time to look again: a call in progress ends, and one that
  // has not spoken may speak (and then go idle), no earlier than now.
  // At or before `now`: due. max(): never.
  Clock::time_point earliest_shutdown(const Connection& c, Clock::time_point now) const;
  void forget_locked(std::map<int, Connection>::iterator it);

  const ConnectionLimits limits_;
  mutable std::mutex mu_;
  std::map<int, Connection> by_fd_;  // by gRPC's descriptor
  std::map<uid_t, uint32_t> per_uid_;
  uint64_t next_serial_ = 1;
  uint64_t silent_total_ = 0;
  uint64_t idle_total_ = 0;
};

// A call on a connection, from its handler's start to its return: while one
// is in progress the connection is not idle.
class ConnectionCall {
 public:
  ConnectionCall(PeerTable* peers, std::string_view grpc_peer) : peers_(peers), id_(peers->begin_call(grpc_peer)) {}
  ~ConnectionCall() {
    if (id_) peers_->end_call(*id_);
  }
  ConnectionCall(const ConnectionCall&) = delete;
  ConnectionCall& operator=(const ConnectionCall&) = delete;

 private:
  PeerTable* peers_;
  std::optional<PeerTable::ConnectionId> id_;
};

}  // namespace memd::daemon
