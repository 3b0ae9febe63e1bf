// memdctl replay TRACE: Vmalloc's trace-driven simulator. Replays a trace
// (docs/trace.md) with memd-replay once per target and round -- memd's
// methods through its malloc shim (best, debug, profile) and other mallocs
// (glibc, jemalloc, mimalloc, tcmalloc) -- and prints the time and the peak
// space of each, with ratios to glibc taken per round (the median of the
// rounds' ratios). Offline: no daemon is asked.
#pragma once

#include "tools/memdctl/command_line.h"

namespace memd::memdctl {

// The exit status: kExitOk, kExitUsage (a method or allocator it does not
// know), or 1 (the trace cannot be read, or a replay failed).
int run_replay(const CommandLine& command_line);

}  // namespace memd::memdctl
