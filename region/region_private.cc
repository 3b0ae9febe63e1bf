// Region::create_private: a region only this process can reach, for a
// private heap under any method (the Vmalloc API's private discipline, C's
// memd_region_create_private). It is a shm region whose name is removed as
// soon as it exists: no other process can open or attach it, and nothing
// is left behind when the process ends, however it ends.
#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "region/region.h"

namespace memd {

absl::StatusOr<std::unique_ptr<Region>> Region::create_private(const RegionOptions& options) {
  static std::atomic<uint64_t> serial{0};
  RegionOptions o = options;
  o.discipline = Discipline::kShm;
  for (int attempt = 0; attempt < 8; ++attempt) {
    char name[64];
    std::snprintf(name, sizeof name, "memd-private-%d-%llu", static_cast<int>(getpid()),
                  static_cast<unsigned long long>(serial.fetch_add(1)));
    absl::StatusOr<std::unique_ptr<Region>> r = create(name, o);
    if (r.ok()) {
      (void)remove(name, Discipline::kShm);
      return r;
    }
    // A name a process of the same pid left behind (a crash between the
    // create and the remove): try the next.
    if (r.status().code() != absl::StatusCode::kAlreadyExists) return r.status();
  }
  return absl::AlreadyExistsError("no free name for a private region in /dev/shm");
}

}  // namespace memd
