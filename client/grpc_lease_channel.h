// LeaseChannel over gRPC: a region's blocks leased from memd. Calls carry a
// deadline; a call that finds the daemon gone waits for the connection to
// come back (DaemonConnection reconnects and resumes the lease) and is
// retried, as is one whose deadline passed. Every call that changes what
// the client holds carries a request id, the same on each attempt, so the
// daemon answers a retry with its first answer instead of applying it
// twice; a grant whose answer never came is abandoned on the next call
// (proto: "Retrying a lease call").
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "client/daemon_connection.h"
#include "region/lease_channel.h"

namespace memd::client {

class GrpcLeaseChannel final : public region::LeaseChannel {
 public:
  GrpcLeaseChannel(std::shared_ptr<DaemonConnection> connection, std::string region, const region::ClientLease& lease,
                   uint32_t handle);
  ~GrpcLeaseChannel() override;  // closes the region with the daemon

  absl::StatusOr<region::ClientLease> hello(pid_t pid, uint64_t start_time) override;
  absl::StatusOr<uint32_t> lease(heap::PageKind kind, uint16_t cls, heap::OwnerId owner, uint32_t count,
                                 heap::AcquiredBlock* out) override;
  absl::Status give_back(const heap::PageIndex* blocks, uint32_t n) override;
  absl::StatusOr<heap::AcquiredBlock> acquire_huge(heap::PageCount pages, heap::PageCount align) override;
  absl::Status release_huge(heap::PageIndex first) override;
  absl::StatusOr<bool> resize_huge(heap::PageIndex first, heap::PageCount want, bool* zeroed) override;

  RegionLink* link() { return &link_; }

 private:
  // What a request says about retries: its id (0: not a change) and the
  // earlier grants the client gave up on.
  struct Retry {
    uint64_t request = 0;
    std::vector<uint64_t> abandon;
    bool first_attempt = true;
    template <class Request>
    void fill(Request* req) const {
      req->set_request(request);
      req->set_first_attempt(first_attempt);
      for (uint64_t id : abandon) req->add_abandon(id);
    }
  };
  enum class Change { kNone, kRelease, kGrant };
  // Runs `call(context, current, handle, retry)`, retrying across a
  // reconnect or a passed deadline.
  template <class Call>
  absl::Status invoke(Change change, Call call);

  std::shared_ptr<DaemonConnection> connection_;
  std::atomic<uint64_t> next_request_{1};
  std::mutex abandoned_mu_;
  std::vector<uint64_t> abandoned_;  // grants whose answer never came, oldest first
  region::ClientLease lease_;
  RegionLink link_;
};

}  // namespace memd::client
