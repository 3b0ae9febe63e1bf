// The regions the daemon serves. The daemon opens each one as its owner
// (memd::Region) and keeps it open while it runs: it is the only writer of
// page-level metadata, and every client lease goes through the region's
// LeaseService under the region's lock. At start it opens every region of
// the catalog, recovering each (clients of the previous daemon that still
// run keep their leases, to resume them).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "region/lease_service.h"
#include "region/region.h"
#include "daemon/catalog.h"
#include "daemon/config.h"
#include "daemon/lease_journal.h"
#include "daemon/peer.h"
#include "daemon/uid_bytes.h"

namespace memd::daemon {

struct ServedRegion {
  uint32_t handle = 0;  // never reused while the daemon runs
  CatalogRecord record;
  // The region as this daemon, its owner, opened it; null once removed, or
  // damaged.
  std::unique_ptr<Region> owner;
  std::mutex lock;  // serializes calls into the LeaseService
  std::atomic<uint64_t> lease_rpcs{0};
  // Answers to the clients' recent lease requests (retryable_call.h); null
  // if its file could not be made (calls are then applied every time).
  std::unique_ptr<LeaseJournal> journal;
  std::atomic<uint64_t> replayed_requests{0};   // repeated requests answered from the journal
  std::atomic<uint64_t> grants_taken_back{0};   // grants to callers that had gone
  // Who holds the region now: attachments of sessions, and leases of
  // processes whose session ended (or whose daemon restarted) that wait to
  // be resumed or reclaimed. A region is removed only at zero.
  std::atomic<uint32_t> attached{0};
  // Why the region is not served (its backing was truncated, a fault found
  // no backing, it could not be opened at start); empty while it is healthy.
  // Guarded by `lock`; `damaged` may be read without it.
  std::string damage;
  std::atomic<bool> damaged{false};
  // Its owner's bytes, which every growth of its object asks (uid_bytes.h).
  UidBytes::Account* bytes_account = nullptr;

  region::LeaseService* leases() const { return owner->lease_service(); }

  // What every call that touches the region's memory asks first and, if it
  // touched it, again afterwards: OK while the region is served; NOT_FOUND
  // once removed; FAILED_PRECONDITION (naming the cause) once damaged. A
  // backing found short or faulted here damages the region: its mapping is
  // dropped without touching it again, and other regions go on.
  // REQUIRES: `lock`.
  absl::Status usable();
  // REQUIRES: `lock`. Logs once.
  void mark_damaged(absl::string_view why);
};

// Regions damaged so far (for the metric).
uint64_t regions_damaged_total();
// Headers of served regions restored from the daemon's copy since it started.
uint64_t region_header_repairs_total();

struct OpenArgs {
  std::string name;
  Discipline discipline{};  // 0: as it is (opening)
  Method method{};          // 0: as it is / best
  bool create = false;
  bool exclusive = false;
  uint64_t max_bytes = 0;
  uint32_t max_clients = 0;
  uint32_t max_threads = 0;
  uint32_t mode = 0;
  bool read_only = false;
};

// A lease kept for a client of the previous daemon.
struct KeptLease {
  std::shared_ptr<ServedRegion> region;
  Region::KeptLease lease;
};

class RegionRegistry {
 public:
  RegionRegistry(const DaemonConfig& config, Catalog* catalog)
      : config_(config), catalog_(catalog), uid_bytes_(config.max_bytes_per_uid) {}

  // Opens every region of the catalog. A region that cannot be opened is
  // logged and skipped (the others are served).
  void load_all(std::vector<KeptLease>* kept);

  // Opens (or creates) a region for `who`, checking its mode.
  absl::StatusOr<std::shared_ptr<ServedRegion>> open(const OpenArgs& args, const Peer& who, bool* created);
  std::shared_ptr<ServedRegion> find(uint32_t handle) const;
  std::shared_ptr<ServedRegion> find(std::string_view name) const;
  std::vector<std::shared_ptr<ServedRegion>> list() const;
  // Deletes a region no client is attached to. Its owner or root only.
  absl::Status remove(std::string_view name, const Peer& who);
  // Closes every region (marks each cleanly closed; checkpoints files).
  void close_all(bool checkpoint);

 private:
  absl::StatusOr<std::shared_ptr<ServedRegion>> create_locked(const OpenArgs& args, const Peer& who);
  // `fresh`: the region was just made, and its lease journal starts empty.
  std::shared_ptr<ServedRegion> add_locked(CatalogRecord record, std::unique_ptr<Region> region, bool fresh);

  const DaemonConfig& config_;
  Catalog* catalog_;
  UidBytes uid_bytes_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<ServedRegion>> regions_;  // by handle - 1; null once removed
};

// The file system object behind a region (for chown, chmod, stat).
std::string object_os_path(const CatalogRecord& r);

// Whether `who` may open a region read-only (`write` false) or to allocate.
absl::Status check_access(const CatalogRecord& r, const Peer& who, bool write);

}  // namespace memd::daemon
