#include "daemon/peer.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace memd::daemon {
namespace {

// The descriptor gRPC names a connection by ("fd:12").
std::optional<int> descriptor_of(std::string_view grpc_peer) {
  constexpr std::string_view kPrefix = "fd:";
  if (grpc_peer.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  std::string_view digits = grpc_peer.substr(kPrefix.size());
  int fd = 0;
  if (!absl::SimpleAtoi(absl::string_view(digits.data(), digits.size()), &fd)) return std::nullopt;
  return fd;
}

}  // namespace

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
  Connection c;
  c.peer = peer;
  c.watch = watch;
  c.serial = next_serial_++;
  c.accepted = c.last_call = Clock::now();
  by_fd_[fd] = c;
  return absl::OkStatus();
}

std::optional<Peer> PeerTable::find(std::string_view grpc_peer) const {
  std::optional<int> fd = descriptor_of(grpc_peer);
  if (!fd) return std::nullopt;
  std::lock_guard<std::mutex> g(mu_);
  auto it = by_fd_.find(*fd);
  if (it == by_fd_.end()) return std::nullopt;
  it->second.spoke = true;
  return it->second.peer;
}

std::optional<PeerTable::ConnectionId> PeerTable::begin_call(std::string_view grpc_peer) {
  std::optional<int> fd = descriptor_of(grpc_peer);
  if (!fd) return std::nullopt;
  std::lock_guard<std::mutex> g(mu_);
  auto it = by_fd_.find(*fd);
  if (it == by_fd_.end()) return std::nullopt;
  ++it->second.calls;
  it->second.last_call = Clock::now();
  return ConnectionId{*fd, it->second.serial};
}

void PeerTable::end_call(const ConnectionId& id) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = by_fd_.find(id.fd);
  // Gone, or the number now names a newer connection: nothing to count.
  if (it == by_fd_.end() || it->second.serial != id.serial) return;
  --it->second.calls;
  it->second.last_call = Clock::now();
}

void PeerTable::forget_locked(std::map<int, Connection>::iterator it) {
  close(it->second.watch);
  auto n = per_uid_.find(it->second.peer.uid);
  if (n != per_uid_.end() && --n->second == 0) per_uid_.erase(n);
  by_fd_.erase(it);
}

PeerTable::Clock::time_point PeerTable::earliest_shutdown(const Connection& c, Clock::time_point now) const {
  constexpr Clock::duration kNever = Clock::duration::zero();
  const bool idles = limits_.idle_timeout != kNever;
  if (!c.spoke) {
    // Whatever it has in progress: a session stream that never sent its
    // hello holds a daemon thread and is no session yet.
    Clock::time_point at =
        limits_.handshake_timeout == kNever ? Clock::time_point::max() : c.accepted + limits_.handshake_timeout;
    // It may speak at any moment, and be idle from idle-timeout after
    // that: if that comes first (a short idle-timeout), look again then.
    return idles ? std::min(at, now + limits_.idle_timeout) : at;
  }
  if (!idles) return Clock::time_point::max();
  // A call in progress ends no earlier than now, and the connection is
  // idle no earlier than idle-timeout after that.
  return (c.calls > 0 ? now : c.last_call) + limits_.idle_timeout;
}

Swept PeerTable::sweep(Clock::time_point now) {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<pollfd> fds;
  fds.reserve(by_fd_.size());
  for (const auto& [fd, c] : by_fd_) fds.push_back({c.watch, 0, 0});
  if (!fds.empty()) (void)poll(fds.data(), fds.size(), 0);
  size_t i = 0;
  Swept swept;
  for (auto it = by_fd_.begin(); it != by_fd_.end(); ++i) {
    if (fds[i].revents != 0) {  // hung up: gRPC closes (or has closed) its descriptor
      auto gone = it++;
      forget_locked(gone);
      continue;
    }
    Connection& c = it->second;
    ++it;
    if (c.shut) continue;
    Clock::time_point at = earliest_shutdown(c, now);
    if (at > now) {
      swept.next = std::min(swept.next, at);
      continue;
    }
    // gRPC reads end of file on its descriptor and closes it; the watch
    // hangs up at once and is forgotten by the next sweep.
    shutdown(c.watch, SHUT_RDWR);
    c.shut = true;
    ++(c.spoke ? swept.idle : swept.silent);
  }
  silent_total_ += swept.silent;
  idle_total_ += swept.idle;
  return swept;
}

void PeerTable::append_watches(std::vector<pollfd>* fds) const {
  std::lock_guard<std::mutex> g(mu_);
  for (const auto& [fd, c] : by_fd_) fds->push_back({c.watch, 0, 0});
}

size_t PeerTable::size() const {
  std::lock_guard<std::mutex> g(mu_);
  return by_fd_.size();
}

uint64_t PeerTable::silent_total() const {
  std::lock_guard<std::mutex> g(mu_);
  return silent_total_;
}

uint64_t PeerTable::idle_total() const {
  std::lock_guard<std::mutex> g(mu_);
  return idle_total_;
}

}  // namespace memd::daemon
