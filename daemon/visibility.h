// What one caller may see of other callers: the rule of Admin.ListClients,
// Admin.Stats and Admin.Profile (docs/daemon.md: who may call what). Root
// sees everything; anyone else sees the processes of its own uid and the
// regions it may read, so that listing, counting or profiling never shows
// another user's processes (their programs, pids, return addresses: ASLR)
// nor the names of regions Regions.List hides from it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>

#include "daemon/peer.h"
#include "daemon/region_registry.h"

namespace memd::daemon {

inline bool sees_everything(const Peer& caller) { return caller.uid == 0; }

inline bool sees_process(const Peer& caller, uid_t process_uid) {
  return sees_everything(caller) || caller.uid == process_uid;
}

inline bool sees_region(const Peer& caller, const CatalogRecord& region) {
  return check_access(region, caller, false).ok();
}

// Whose samples a profile for `caller` may hold: one uid, or every user's.
inline std::optional<uint32_t> visible_samples_of(const Peer& caller) {
  if (sees_everything(caller)) return std::nullopt;
  return caller.uid;
}

}  // namespace memd::daemon
