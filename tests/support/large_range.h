// Heap parameters with a large range: objects of 16-32 KiB on the large path
// (best fit, headers, coalescing), as the defaults had before size classes
// reached 64 KiB. The defaults have no large sizes (large_max ==
// medium_max); tests of the large path itself ask for these.
#pragma once

#include "heap/params.h"

namespace memd::testing {

inline heap::HeapParams params_with_large_range() {
  heap::HeapParams p;
  p.medium_max = 16384;
  p.large_max = 32768;
  return p;
}

}  // namespace memd::testing
