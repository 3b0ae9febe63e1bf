// The errno a C caller gets for a region's absl::Status (memd_region.h and
// vmalloc.h promise the same numbers).
#pragma once

#include "absl/status/status.h"

namespace memd::client {

int errno_of(const absl::Status& s);

}  // namespace memd::client
