// A Region's internals, for libmemd's own code (the daemon client, the
// shim's daemon link) and for tests that inspect a region's raw state. The
// daemon and the tools never include this: they hold a region through
// Region's own calls (tests/layering/check_includes.py keeps it so).
#pragma once

#include "region/region.h"
#include "region/region_impl.h"

namespace memd {

struct RegionInternals {
  static RegionImpl* of(const Region& r) { return r.impl_.get(); }
};

}  // namespace memd
