// Who is on the other end of a client connection. The daemon accepts each
// connection itself, reads SO_PEERCRED (the kernel's word, not the
// client's), and only then hands the socket to gRPC, which names the
// connection "fd:<n>" in ServerContext::peer(). The table maps that name
// back to the credentials.
#pragma once

#include <sys/types.h>

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace memd::daemon {

struct Peer {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

class PeerTable {
 public:
  // A new connection on `fd` (a previous one on the same number has ended:
  // the kernel reuses a number only after it is closed).
  void add(int fd, const Peer& peer);
  // The credentials of a gRPC peer name ("fd:12"); nothing if unknown.
  std::optional<Peer> find(std::string_view grpc_peer) const;

 private:
  mutable std::mutex mu_;
  std::map<int, Peer> by_fd_;
};

}  // namespace memd::daemon
