// Upgrading a region made by an older build, in place, when its page-heap
// owner opens it. docs/region-format.md lists what changed in each version.
//
//   2 -> 3: a block's remote list became one 64-bit word of head, tail and
//           count (RemoteList in layout.h) at byte 56 of its BlockDesc; it was
//           a 32-bit head at byte 48. Every block's list is walked once,
//           counted and re-encoded; pending-stack links are dropped (every
//           owner slot is closed at open anyway).
//   3 -> 4: an in-use block's bytes 32..39, where a free run keeps its LRU
//           links, became its taken word (remote frees its owner took and
//           had not yet moved: remote_free.h). They held stale links, and
//           are cleared.
#pragma once

#include <cstdint>

#include "heap/layout.h"
#include "heap/memory_source.h"

namespace memd::heap {

// Brings the region at `r`, whose header region_validate accepted as
// upgradable (version kOldestUpgradableVersion up to kFormatVersion - 1), to
// kFormatVersion, and says so in its header last, after the rest is durable.
// A remote list that leaves its block or cycles is cut (or dropped) there:
// what is cut leaks and is counted in *leaked.
//
// A crash part way leaves the old version in the header; the next open
// upgrades again, and every step is safe to repeat: a descriptor already
// converted is recognized by its count (a version-2 descriptor has zeros
// where the count goes).
//
// REQUIRES: the caller is the region's page-heap owner and has the region to
// itself: no process of a previous owner's time runs on it (it would go on
// writing the old format). Region recovery follows (it runs at every open).
// Returns false, changing nothing, for a version it cannot upgrade.
bool region_upgrade(const Region& r, MemorySource& source, uint64_t* leaked);

}  // namespace memd::heap
