// The page-heap owner's side of leasing: what the daemon (and, without one,
// the process that owns a shared region) does for client processes. Every
// request is checked against the lease table and the page descriptors, so a
// confused or malicious client gets an error, never a corrupt heap.
//
//   register_client    a lease slot for a process (pid + start time) and
//                      the owner slot of its stash of spare blocks
//   lease              up to N blocks of one kind and class: an abandoned
//                      block first (owned by the asking thread heap), then
//                      fresh ones (owned by the client's stash)
//   release / abandon  blocks the client disowned, empty or not
//   huge               runs for single objects, and their return
//   client_gone        the process died or disconnected: everything it held
//                      is taken back (empty blocks freed, others abandoned
//                      for the next client to adopt)
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/page_heap_owner.h"
#include "heap/block_source.h"
#include "heap/layout.h"

namespace memd::client {

struct ClientLease {
  uint32_t slot = 0;          // lease slot
  uint32_t holder = 0;        // the tag its owner slots carry (slot + 1)
  heap::OwnerId stash = 0;    // owner id of its spare blocks
};

inline constexpr uint32_t kMaxLeaseBatch = 32;

class LeaseService {
 public:
  explicit LeaseService(PageHeapOwner* pages) : pages_(pages) {}

  absl::StatusOr<ClientLease> register_client(pid_t pid, uint64_t start_time);
  // Up to `count` (<= kMaxLeaseBatch) blocks. The first may be adopted (then
  // owned by `owner`, which must be an owner slot the client holds); the
  // rest are fresh and owned by the client's stash. Fills `out`; returns how
  // many, or an error status (RESOURCE_EXHAUSTED when memory runs out).
  absl::StatusOr<uint32_t> lease(uint32_t client, heap::PageKind kind, uint16_t cls, heap::OwnerId owner,
                                 uint32_t count, heap::AcquiredBlock* out);
  // Blocks the client disowned (or its stash owns). The owner counts what
  // each holds: empty ones go back to the page heap, the others are listed
  // for adoption.
  absl::Status give_back(uint32_t client, const heap::PageIndex* blocks, uint32_t n);
  absl::StatusOr<heap::AcquiredBlock> acquire_huge(uint32_t client, heap::PageCount pages,
                                                   heap::PageCount align);
  absl::Status release_huge(uint32_t client, heap::PageIndex first);
  absl::StatusOr<bool> resize_huge(uint32_t client, heap::PageIndex first, heap::PageCount want,
                                   bool* zeroed);
  // Takes back everything the client held and frees its lease slot.
  void client_gone(uint32_t client);

 private:
  absl::Status check_client(uint32_t client) const;
  bool holds_slot(uint32_t client, heap::OwnerId owner) const;

  PageHeapOwner* pages_;
};

// The start time of process `pid` (clock ticks after boot, /proc/pid/stat),
// 0 if it cannot be read or the process has exited (a zombie). With the
// pid, it names a process uniquely.
uint64_t process_start_time(pid_t pid);

}  // namespace memd::client
