// How a client process reaches the page-heap owner of a shared region. The
// daemon will answer over gRPC; without it, the owning process answers on a
// Unix socket (lease_socket.h). Calls are rare (blocks come in batches), so a
// round trip per call is fine; thread heaps call it from slow paths only.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "region/lease_service.h"
#include "heap/block_source.h"

namespace memd::region {

class LeaseChannel {
 public:
  virtual ~LeaseChannel() = default;
  virtual absl::StatusOr<ClientLease> hello(pid_t pid, uint64_t start_time) = 0;
  virtual absl::StatusOr<uint32_t> lease(heap::PageKind kind, uint16_t cls, heap::OwnerId owner,
                                         uint32_t count, heap::AcquiredBlock* out) = 0;
  virtual absl::Status give_back(const heap::PageIndex* blocks, uint32_t n) = 0;
  virtual absl::StatusOr<heap::AcquiredBlock> acquire_huge(heap::PageCount pages, heap::PageCount align) = 0;
  virtual absl::Status release_huge(heap::PageIndex first) = 0;
  virtual absl::StatusOr<bool> resize_huge(heap::PageIndex first, heap::PageCount want, bool* zeroed) = 0;
};

}  // namespace memd::region
