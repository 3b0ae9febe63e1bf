// Every environment option of libmemd and the malloc shim, declared once in
// one table (options.cc). Read with getenv only: safe before malloc works.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "region/arena.h"

namespace memd::region {

// Arena options for the process heap, from the environment.
ArenaOptions process_arena_options();

// Whether a detected heap error (bad free, double free) aborts the process
// (MEMD_ABORT_ON_ERROR=1) or is reported and survived (the default).
bool abort_on_error();
// Whether reports are silenced (MEMD_QUIET=1).
bool quiet();

// A size as every memd setting takes it, in the environment and in the
// daemon's configuration alike: a whole number, then optionally K, M, G or
// T (binary: KiB ... TiB), and nothing else. False if it is not one or does
// not fit 64 bits. Allocates nothing (the shim reads settings before malloc
// works).
bool parse_bytes(std::string_view text, uint64_t* out);

// Telemetry settings, for memd::Client and the malloc shim alike. A field
// is -1 where its variable is unset, and where its value does not parse:
// that is reported on stderr (naming the variable and what it takes), and
// the caller's default stands.
struct TelemetrySettings {
  int enabled = -1;           // MEMD_TELEMETRY: a number, 0 for off
  int64_t sample_bytes = -1;  // MEMD_SAMPLE_BYTES: bytes (parse_bytes: K, M, G or T); 0: no sampling
  int64_t interval_ms = -1;   // MEMD_TELEMETRY_INTERVAL_MS: at least 1
};
TelemetrySettings telemetry_settings();

// How long a named-root call of a region waits for the region's roots lock
// before it fails with ETIMEDOUT (MEMD_ROOTS_LOCK_TIMEOUT_MS, default 10 s).
// A process stopped (SIGSTOP, a debugger) while it holds the lock keeps it:
// the lock is robust against its holder's death, not against its sleep. A
// bad value is reported, and the default stands.
uint64_t roots_lock_timeout_ms();

// MEMD_PREFAULT: whether this process populates the fresh blocks and runs
// it takes, in its own heap and in every region it allocates in.
bool prefault_enabled();


// For the shim's daemon link, a second copy of this code loaded by a shim
// that has parsed (and reported) the settings already: parse, say nothing.
void settings_reported_elsewhere();

}  // namespace memd::region
