// memdctl file ...: a region file with its owner (memd) stopped, without the
// daemon. info, check and roots read it under a shared lock that keeps an
// owner out meanwhile; repair shows what recovery would do (it recovers a
// scratch copy) and does it with --apply; copy and snapshot make a second
// region file (snapshot: by reflink only).
#pragma once

#include "tools/memdctl/command_line.h"

namespace memd::memdctl {

// The exit status: kExitOk; kExitCheckFailed (check, or repair finding the
// file damaged beyond recovery); kExitCallFailed (the file cannot be read,
// has an owner, or a copy failed).
int run_file(const CommandLine& command_line);

}  // namespace memd::memdctl
