// The shim's debug method (Vmalloc's Vmdebug, for a whole unmodified
// program): with VMDEBUG=1, VMETHOD=Vmdebug or MEMD_METHOD=debug, every allocation is a
// debug block (heap/debug_block.h) in a heap of its own, and the shim
// reports, in the paper's form, on stderr:
//
//   corrupted data:region=(process):block=0x..:bad byte at=4:allocated at=t.c,4:...
//   free error:region=(process):block=0x..:unallocated block:detected at=t.c,6:
//   free error:region=(process):block=0x..:already freed:detected at=t.c,19:
//   alert:region=(process):block=0x..:size=5:just allocated:detected at=t.c,10:
//
// Each line starts with "memd: ". Sites are a file and line where the
// program records them (client/memd_debug.h), else a return address given
// as object+offset (addr2line -e object offset names the line).
//
// Settings, a comma list in VMDEBUG (after its first field, which turns the
// method on) or in MEMD_DEBUG (with MEMD_METHOD=debug):
//   0x...   a watched address: every call that meets it says so (alert)
//   check   checks every live block at every call (Vmalloc's VM_DBCHECK);
//           without it, a block is checked when freed or resized, and all
//           live blocks when the program exits
//   abort   aborts at the first error (VM_DBABORT)
// Freed blocks wait in a quarantine (the last 4096, at most 64 MiB) filled
// with a pattern: a second free of one is "already freed", and a write to
// one is reported when it leaves.
//
// The profile method (Vmprofile: VMPROFILE=file, or MEMD_METHOD=profile with
// MEMD_PROFILE=file, default stderr) runs on the same blocks, without the
// guards' checks and the quarantine: it counts what each call site
// allocated and freed (region/profile_sites.h) and writes the summary at exit.
// VMDEBUG and VMPROFILE together run both.
//
// VMTRACE=file (or MEMD_TRACE=file), with any of these or alone, appends a
// line per call to the file (docs/trace.md).
#pragma once

#include <cstdint>

#include "client/shim/daemon_link.h"
#include "heap/debug_block.h"

namespace memd::client::shim {

// The debug (or profile) method's heap, as the shim redirects to it (the
// same calls as a daemon region's heap), if the environment asks for the
// method; else nullptr. Reads the environment once; creates the heap on the first call.
const memd_daemon_heap* debug_heap_if_wanted();

// With MEMD_REGION, the same variables ask the region for the method
// instead (its books are then the region's, region/region_debug.cc): what
// they ask for. `method` 0: nothing (the region's own method); else
// memd_region.h's MEMD_DEBUG or MEMD_PROFILE. Reads the environment.
struct RegionMethodWish {
  int method = 0;
  bool check = false, abort = false;
  uintptr_t watch[16] = {};
  int watches = 0;
  int profile_fd = -1;  // where the summary goes at exit; -1: nowhere
  bool trace = false;   // VMTRACE asked for: not done in a region (said)
};
RegionMethodWish region_method_wish();

// The site of the program's call now being served: what it recorded
// (memd_debug.h), else the first return address outside the shim.
heap::DebugSite program_call_site();

}  // namespace memd::client::shim
