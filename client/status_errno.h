// The errno a C caller gets for a region's absl::Status (memd_region.h and
// vmalloc.h promise the same numbers).
#pragma once

#include <cerrno>
#include <cstddef>

#include "absl/status/status.h"

namespace memd::client {

int errno_of(const absl::Status& s);

// count * size in *bytes; false with errno ENOMEM if it overflows (calloc's
// promise, in every C API that takes a count and a size).
inline bool bytes_of(size_t count, size_t size, size_t* bytes) {
  if (!__builtin_mul_overflow(count, size, bytes)) return true;
  errno = ENOMEM;
  return false;
}

}  // namespace memd::client
