// Every environment option of libmemd and the malloc shim, declared once in
// one table (options.cc). Read with getenv only: safe before malloc works.
#pragma once

#include <cstddef>

#include "client/arena.h"

namespace memd::client {

struct Option {
  const char* name;         // environment variable
  const char* default_text; // as documented
  const char* description;
};

// The table, for documentation and --help style listings.
const Option* options_table(size_t* count);

// Arena options for the process heap, from the environment.
ArenaOptions process_arena_options();

// Whether a detected heap error (bad free, double free) aborts the process
// (MEMD_ABORT_ON_ERROR=1) or is reported and survived (the default).
bool abort_on_error();
// Whether reports are silenced (MEMD_QUIET=1).
bool quiet();

}  // namespace memd::client
