// memdctl pprof SUMMARY [-o FILE]: the profile method's summary (VMPROFILE
// under the shim, vmprofile() in vmalloc.h) as a pprof profile that `go
// tool pprof` reads (tools/memdctl/profile_summary.h). Offline.
#pragma once

#include "tools/memdctl/command_line.h"

namespace memd::memdctl {

// kExitOk; 1 if the summary cannot be read or is not one; kExitWriteFailed
// if the profile cannot be written.
int run_pprof(const CommandLine& command_line);

}  // namespace memd::memdctl
