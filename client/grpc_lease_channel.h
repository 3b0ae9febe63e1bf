// LeaseChannel over gRPC: a region's blocks leased from memd. Calls carry a
// deadline; a call that finds the daemon gone waits for the connection to
// come back (DaemonConnection reconnects and resumes the lease) and is
// retried.
#pragma once

#include <memory>

#include "client/daemon_connection.h"
#include "client/lease_channel.h"

namespace memd::client {

class GrpcLeaseChannel final : public LeaseChannel {
 public:
  GrpcLeaseChannel(std::shared_ptr<DaemonConnection> connection, std::string region, const ClientLease& lease,
                   uint32_t handle);
  ~GrpcLeaseChannel() override;  // closes the region with the daemon

  absl::StatusOr<ClientLease> hello(pid_t pid, uint64_t start_time) override;
  absl::StatusOr<uint32_t> lease(heap::PageKind kind, uint16_t cls, heap::OwnerId owner, uint32_t count,
                                 heap::AcquiredBlock* out) override;
  absl::Status give_back(const heap::PageIndex* blocks, uint32_t n) override;
  absl::StatusOr<heap::AcquiredBlock> acquire_huge(heap::PageCount pages, heap::PageCount align) override;
  absl::Status release_huge(heap::PageIndex first) override;
  absl::StatusOr<bool> resize_huge(heap::PageIndex first, heap::PageCount want, bool* zeroed) override;

  RegionLink* link() { return &link_; }

 private:
  // Runs `call(context, current, handle)`, retrying across a reconnect.
  template <class Call>
  absl::Status invoke(Call call);

  std::shared_ptr<DaemonConnection> connection_;
  ClientLease lease_;
  RegionLink link_;
};

}  // namespace memd::client
