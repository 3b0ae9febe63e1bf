// Containing SIGBUS from shared mappings whose backing someone else changes.
//
// A process that maps a file or shm object it does not solely control gets
// SIGBUS when it touches a page the object no longer backs: another process
// truncated it, or (tmpfs) a page that was punched out cannot be allocated
// again because the file system is full. In the daemon that would let any
// user who can write a region's object kill the service for everyone.
//
// The guard keeps a table of guarded ranges. Its SIGBUS handler, for a fault
// inside one, maps a private zero page over the faulting page (so the
// interrupted code reads zeros and its writes go nowhere), counts the fault
// against the range and returns; the owner of the range then treats the
// mapping as failed and stops using it. A fault outside every range goes to
// the handler that was there before (by default: the process dies as it
// would have).
//
// guard_range/unguard_range/range_faults are lock-free and async-signal-safe
// to read from the handler; install_fault_guard is called once at start by
// the process that wants faults contained (the daemon). Without it, ranges
// are only registered and SIGBUS behaves as usual.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace memd::disciplines {

// Installs the SIGBUS handler (idempotent).
absl::Status install_fault_guard();
bool fault_guard_installed();

// Guards [base, base + len); returns a slot, or -1 if every slot is taken
// (the range is then unguarded).
int guard_range(const void* base, size_t len);
// Stops guarding slot `id` (before the range is unmapped).
void unguard_range(int id);
// Faults contained in slot `id` since it was guarded; *first_offset gets the
// offset of the first one from the range's base (if any, and if not null).
uint64_t range_faults(int id, size_t* first_offset = nullptr);

}  // namespace memd::disciplines
