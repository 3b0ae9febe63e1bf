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
};

}  // namespace memd
