#include "daemon/peer.h"

#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace memd::daemon {

PeerTable::~PeerTable() {
  for (auto& [fd, c] : by_fd_) close(c.watch);
}

absl::Status PeerTable::add(int fd, int watch, const Peer& peer) {
  std::lock_guard<std::mutex> g(mu_);
  if (auto old = by_fd_.find(fd); old != by_fd_.end()) forget_locked(old);
  uint32_t& open = per_uid_[peer.uid];
  if (peer.uid != 0 && limits_.per_uid != 0 && open >= limits_.per_uid) {
    if (open == 0) per_uid_.erase(peer.uid);
    return absl::ResourceExhaustedError(absl::StrCat("uid ", peer.uid, " has ", open,
                                                     " connections open, the limit (max-connections-per-uid)"));
  }
  ++open;
  Connection c{peer, watch, Clock::time_point::max(), false};
  if (limits_.handshake_timeout != Clock::duration::zero()) c.deadline = Clock::now() + limits_.handshake_timeout;
  by_fd_[fd] = c;
  return absl::OkStatus();
}

std::optional<Peer> PeerTable::find(std::string_view grpc_peer) const {
  constexpr std::string_view kPrefix = "fd:";
  if (grpc_peer.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  std::string_view digits = grpc_peer.substr(kPrefix.size());
  int fd = 0;
  if (!absl::SimpleAtoi(absl::string_view(digits.data(), digits.size()), &fd)) return std::nullopt;
  std::lock_guard<std::mutex> g(mu_);
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return std::nullopt;
  it->second.spoke = true;
  return it->second.peer;
}

void PeerTable::forget_locked(std::map<int, Connection>::iterator it) {
  close(it->second.watch);
  auto n = per_uid_.find(it->second.peer.uid);
  if (n != per_uid_.end() && --n->second == 0) per_uid_.erase(n);
  by_fd_.erase(it);
}

size_t PeerTable::sweep(Clock::time_point now, Clock::time_point* next) {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<pollfd> fds;
  fds.reserve(by_fd_.size());
  for (const auto& [fd, c] : by_fd_) fds.push_back({c.watch, 0, 0});
  if (!fds.empty()) (void)poll(fds.data(), fds.size(), 0);
  size_t i = 0, shut = 0;
  *next = Clock::time_point::max();
  for (auto it = by_fd_.begin(); it != by_fd_.end(); ++i) {
    if (fds[i].revents != 0) {  // hung up: gRPC closes (or has closed) its descriptor
      auto gone = it++;
      forget_locked(gone);
      continue;
    }
    Connection& c = it->second;
    if (!c.spoke && c.deadline <= now) {
      // gRPC reads end of file on its descriptor and closes it; the watch
      // hangs up at once and is forgotten by the next sweep.
      shutdown(c.watch, SHUT_RDWR);
      c.deadline = Clock::time_point::max();
      ++shut;
    } else if (!c.spoke && c.deadline < *next) {
      *next = c.deadline;
    }
    ++it;
  }
  return shut;
}

void PeerTable::append_watches(std::vector<pollfd>* fds) const {
  std::lock_guard<std::mutex> g(mu_);
  for (const auto& [fd, c] : by_fd_) fds->push_back({c.watch, 0, 0});
}

size_t PeerTable::size() const {
  std::lock_guard<std::mutex> g(mu_);
  return by_fd_.size();
}

}  // namespace memd::daemon
