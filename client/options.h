// Every environment option of libmemd and the malloc shim, declared once in
// one table (options.cc). Read with getenv only: safe before malloc works.
#pragma once

#include <cstddef>

#include "client/arena.h"

namespace memd::client {

// Arena options for the process heap, from the environment.
ArenaOptions process_arena_options();

// Whether a detected heap error (bad free, double free) aborts the process
// (MEMD_ABORT_ON_ERROR=1) or is reported and survived (the default).
bool abort_on_error();
// Whether reports are silenced (MEMD_QUIET=1).
bool quiet();

}  // namespace memd::client
