// Copying a region file for memdctl file copy/snapshot: a reflink (the file
// system shares the blocks, instantly) where it can, else a copy of the
// file's data ranges only, so that a sparse reservation stays sparse.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace memd::memdctl {

struct CopyResult {
  bool reflinked = false;
  uint64_t data_bytes = 0;  // bytes copied (a reflink: the file's length)
  uint64_t file_bytes = 0;  // the file's length
};

// Copies `from` to `to`, which must not exist (made with `from`'s mode),
// and syncs it. reflink_only: fail (UNIMPLEMENTED) where the file system
// cannot reflink, leaving nothing behind.
absl::StatusOr<CopyResult> copy_region_file(const std::string& from, const std::string& to, bool reflink_only);

}  // namespace memd::memdctl
