// Leasing over a Unix stream socket: the owner of a shared region answers
// client processes without a daemon. One fixed-size request and response
// per call; the first request of a connection registers the process, and
// the connection's end (EOF: the process exited or was killed) tells the
// owner to take back everything the process held.
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "region/lease_channel.h"
#include "region/lease_service.h"

namespace memd::region {

namespace lease_wire {
struct Request;
struct Response;
}  // namespace lease_wire

// The client end. Thread-safe: one call at a time on the connection.
class SocketLeaseChannel final : public LeaseChannel {
 public:
  static absl::StatusOr<std::unique_ptr<SocketLeaseChannel>> connect(std::string_view path);
  ~SocketLeaseChannel() override;

  absl::StatusOr<ClientLease> hello(pid_t pid, uint64_t start_time) override;
  absl::StatusOr<uint32_t> lease(heap::PageKind kind, uint16_t cls, heap::OwnerId owner, uint32_t count,
                                 heap::AcquiredBlock* out) override;
  absl::Status give_back(const heap::PageIndex* blocks, uint32_t n) override;
  absl::StatusOr<heap::AcquiredBlock> acquire_huge(heap::PageCount pages, heap::PageCount align) override;
  absl::Status release_huge(heap::PageIndex first) override;
  absl::StatusOr<bool> resize_huge(heap::PageIndex first, heap::PageCount want, bool* zeroed) override;

 private:
  explicit SocketLeaseChannel(int fd) : fd_(fd) {}
  absl::Status call(const lease_wire::Request& req, lease_wire::Response* resp);

  int fd_;
  pthread_mutex_t lock_ = PTHREAD_MUTEX_INITIALIZER;
};

// The owner end: a thread that accepts clients on `path` and answers them
// from `service`. `usable`, if given, is asked before each request: once it
// says no (the region's backing shrank, its header was overwritten), every
// request is refused with FAILED_PRECONDITION and its message, as the
// daemon refuses calls on a damaged region.
//
// One thread serves every connection, none of them blocking it: sockets are
// non-blocking and each connection is a small state machine (the bytes of
// the request so far, the bytes of the answer not yet sent) on one poll
// loop. A peer that sends half a request, or stops reading its answers,
// delays no one else; it is dropped once it has made no progress for
// `Limits::stalled_peer`.
class SocketLeaseServer {
 public:
  using UsableCheck = std::function<absl::Status()>;
  struct Limits {
    // How long a connection may sit in the middle of a request, or with an
    // answer it does not read, before it is dropped (and what its process
    // held taken back). A libmemd client sends a request in one write and
    // reads the whole answer, so only a peer that is not one (or a process
    // stopped mid-call) gets here; waiting costs the others nothing. A
    // connection between requests may stay idle as long as it likes.
    std::chrono::milliseconds stalled_peer{10'000};
  };
  static absl::StatusOr<std::unique_ptr<SocketLeaseServer>> start(std::string_view path, LeaseService* service,
                                                                  UsableCheck usable = nullptr);
  static absl::StatusOr<std::unique_ptr<SocketLeaseServer>> start(std::string_view path, LeaseService* service,
                                                                  UsableCheck usable, Limits limits);
  ~SocketLeaseServer();  // stops the thread, closes every connection, removes the socket file

  // Clients registered and not yet gone.
  uint32_t clients() const { return clients_.load(std::memory_order_relaxed); }

 private:
  class Loop;
  SocketLeaseServer() = default;

  LeaseService* service_ = nullptr;
  UsableCheck usable_;
  Limits limits_;
  std::string path_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd: tells the thread to stop
  std::thread thread_;
  std::atomic<uint32_t> clients_{0};
};

}  // namespace memd::region
