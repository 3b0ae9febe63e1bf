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
//
// What a client holds is kept here, in the owner's own memory (the ledger),
// not in the region: every process of a region can write the region, so a
// block's owner word alone cannot prove who leased it. A release names only
// blocks the ledger gives to the caller; a huge run is released or resized
// only by a caller that has claimed it (its owner word names an owner slot
// the caller holds). A batch is checked whole before any of it is applied.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "region/page_heap_owner.h"
#include "heap/block_source.h"
#include "heap/layout.h"

namespace memd::region {

struct ClientLease {
  uint32_t slot = 0;          // lease slot
  uint32_t holder = 0;        // the tag its owner slots carry (slot + 1)
  heap::OwnerId stash = 0;    // owner id of its spare blocks
};

inline constexpr uint32_t kMaxLeaseBatch = 32;
// Blocks one release may name (a client gives back a stash at most).
inline constexpr uint32_t kMaxReleaseBatch = 1024;

class LeaseService {
 public:
  explicit LeaseService(PageHeapOwner* pages);

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
  // Blocks granted to `client` whose answer it never received (its call
  // was cancelled, or it gave the call up): checked as give_back checks,
  // except that the first block of a grant may still be owned by the thread
  // heap that asked.
  absl::Status take_back(uint32_t client, const heap::PageIndex* blocks, uint32_t n);
  // Finishing a release the owner died in the middle of: of the blocks
  // named, those still leased to `client` and disowned go back; the others
  // (given back already) are skipped. Returns how many went back.
  uint32_t give_back_held(uint32_t client, const heap::PageIndex* blocks, uint32_t n);
  absl::StatusOr<heap::AcquiredBlock> acquire_huge(uint32_t client, heap::PageCount pages,
                                                   heap::PageCount align);
  // A huge run granted to `client` that it never received: freed, if
  // nobody has claimed it since.
  absl::Status take_back_run(uint32_t client, heap::PageIndex first);
  absl::Status release_huge(uint32_t client, heap::PageIndex first);
  absl::StatusOr<bool> resize_huge(uint32_t client, heap::PageIndex first, heap::PageCount want,
                                   bool* zeroed);
  // Takes back everything the client held and frees its lease slot.
  void client_gone(uint32_t client);
  // Called by client_gone for the dead client's holder tag (lease slot + 1)
  // before its owner slots are reclaimed, while they still name it: what a
  // method keeps per owner slot outside the blocks (a pool's caches) goes
  // back here.
  void set_before_reclaim(std::function<void(uint32_t holder)> f) { before_reclaim_ = std::move(f); }

  // After the region was opened keeping the leases of clients that outlived
  // the previous owner: the ledger is rebuilt from the blocks those clients'
  // owner slots own, and each lease slot's block count is recounted.
  void rebuild_ledger();
  // Whether every block named is leased to `client` now (a grant repeated
  // from the journal must still be the client's), and whether a huge run
  // starts at `first`.
  bool holds(uint32_t client, const heap::PageIndex* blocks, uint32_t n) const;
  bool has_run(heap::PageIndex first) const;
  // Blocks the ledger gives to `client` now.
  uint64_t blocks_held(uint32_t client) const;
  // Verifies what the owner keeps outside the page heap: the abandoned lists
  // (no cycle, no block twice, nothing owned or leased on them), the ledger
  // (each entry starts a block, no block held by two clients, counts agree
  // with the lease table). False and a message if broken.
  bool check(char* message, size_t message_size) const;

 private:
  std::function<void(uint32_t holder)> before_reclaim_;
  absl::Status check_client(uint32_t client) const;
  bool holds_slot(uint32_t client, heap::OwnerId owner) const;
  // REQUIRES: mu_. Whether the batch may go back: each block leased to
  // `client`, named once, and disowned (or owned by its stash), unless
  // `in_use_ok`.
  absl::Status check_batch(uint32_t client, const heap::PageIndex* blocks, uint32_t n, bool in_use_ok) const;
  // REQUIRES: mu_, a checked batch. Out of the ledger, repaired, and freed
  // (empty) or listed for adoption.
  void return_blocks(const heap::PageIndex* blocks, uint32_t n);
  // Whether `p` starts a segregated or large block.
  bool starts_block(heap::PageIndex p) const;
  // REQUIRES: the huge run at `first` exists. OK if its owner word names an
  // owner slot `client` holds: the client claimed it.
  absl::Status check_claimed(uint32_t client, heap::PageIndex first) const;

  PageHeapOwner* pages_;
  mutable std::mutex mu_;  // guards ledger_; taken before the page heap's lock
  // Block (its first page) -> lease slot of the client it is leased to.
  absl::flat_hash_map<uint32_t, uint32_t> ledger_;
  std::vector<uint64_t> held_;  // by lease slot: its blocks in the ledger
  // Huge run (its first page) -> its length as the page heap made it: the
  // run's descriptor, which any process of the region can write, is set
  // back to it before the page heap frees or resizes the run.
  absl::flat_hash_map<uint32_t, uint32_t> runs_;
  // REQUIRES: mu_. The run at `first` as the daemon knows it, restored.
  absl::Status restore_run(heap::PageIndex first);
  // REQUIRES: mu_. The ledger's changes; each keeps held_ and the lease
  // table's count in step (set_held).
  void hold(uint32_t block, uint32_t client);
  void drop(uint32_t block);
  void set_held(uint32_t client, uint64_t blocks);
  // The holder tag (lease slot + 1) of the client whose owner slot owns the
  // block at `p`, or 0.
  uint32_t owning_holder(heap::PageIndex p) const;
  // Calls visit(first page, pages, starts a block) for each run of the
  // committed pages, in order, while it returns true; a run whose length
  // was overwritten is visited page by page.
  template <class Visit>
  bool walk_runs(Visit visit) const;
};

// The start time of process `pid` (clock ticks after boot, /proc/pid/stat),
// 0 if it cannot be read or the process has exited (a zombie). With the
// pid, it names a process uniquely.
uint64_t process_start_time(pid_t pid);

}  // namespace memd::region
