// The daemon's record of the regions it serves, kept in the data directory
// (one small text file per region under catalog/, and the lease journal of
// each under journal/), so that a restarted
// daemon knows every region, who owns it and who may open it. The region's
// own header stays the authority on its format; the catalog adds what the
// header does not say: its name for clients, its owner and its mode.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "region/region.h"

namespace memd::daemon {

struct CatalogRecord {
  std::string name;          // as clients name it
  Discipline discipline = Discipline::kShm;
  Method method = Method::kBest;
  std::string object;        // what Region::open takes: shm object name or file path
  uid_t owner_uid = 0;
  gid_t owner_gid = 0;
  uint32_t mode = 0600;
  uint64_t max_bytes = 0;
  uint64_t created_ms = 0;   // unix ms
  // Saved before the object is made and cleared once it is: a record still
  // creating at start names an object a crash left half made (or not made),
  // which is removed with the record.
  bool creating = false;
};

class Catalog {
 public:
  explicit Catalog(std::string data_dir);
  // Creates the directories (data dir and catalog/, regions/).
  absl::Status init();
  absl::StatusOr<std::vector<CatalogRecord>> load() const;
  // Written to a temporary file and renamed: a crash leaves the old record
  // or the new one, never half of one.
  absl::Status save(const CatalogRecord& r) const;
  absl::Status erase(const std::string& name) const;
  // Where the daemon keeps the answers to the lease calls of the region
  // named `name` (lease_journal.h).
  std::string journal_path(const std::string& name) const;
  // Where a file or pmem region named `name` keeps its data.
  std::string region_path(const std::string& name, Discipline d) const;

 private:
  std::string record_path(const std::string& name) const;
  std::string data_dir_;
};

}  // namespace memd::daemon
