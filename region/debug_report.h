// The debug method's report lines, in the Vmalloc paper's form, shared by
// the private method (client/debug_method.h) and the one whose books are in
// a region (region/region_debug.cc). Each line starts "memd: " and is
// written to stderr with one write(2). No malloc.
#pragma once

#include <cstdint>

#include "heap/debug_block.h"
#include "region/report_line.h"

namespace memd::region {

// "memd: <kind>:region=<label>:block=0x...:", to be continued.
Line start_debug_report(const char* kind, const char* label, const void* block);

// "memd: alert:region=<label>:block=0x..:size=<n>:<what>:detected at=<site>:"
// (a watched address met by a call).
void write_debug_alert(const char* label, const void* block, uint64_t size, const char* what,
                       const heap::DebugSite& detected);

}  // namespace memd::region
