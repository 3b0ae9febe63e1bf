#include "daemon/peer.h"

#include "absl/strings/numbers.h"

namespace memd::daemon {

void PeerTable::add(int fd, const Peer& peer) {
  std::lock_guard<std::mutex> g(mu_);
  by_fd_[fd] = peer;
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
  return it->second;
}

}  // namespace memd::daemon
