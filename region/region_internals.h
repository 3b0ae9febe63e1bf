// A Region's internals, for region/'s own code and for tests that inspect a
// region's raw state. Nothing outside region/ includes this (nor
// region_impl.h): the daemon, the tools and the rest of libmemd hold a region
// through Region's own calls (tests/layering/check_includes.py, run at every
// build, keeps it so).
#pragma once

#include "region/region.h"
#include "region/region_impl.h"

namespace memd {

struct RegionInternals {
  static RegionImpl* of(const Region& r) { return r.impl_.get(); }
  // The method's books in the region (heap/site_table.h for debug and
  // profile), made on first use; nullptr if they cannot be.
  static void* method_state(const Region& r) { return r.method_state(); }
};

}  // namespace memd
