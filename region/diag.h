// Reports on stderr, formatted into a stack buffer: no malloc, usable from
// inside malloc. Heap errors (invalid pointer, double free) name the
// address and the caller's return address.
#pragma once

#include <cstddef>
#include <cstdint>

namespace memd::region {

enum class HeapError { kInvalidPointer, kDoubleFree };

// Writes "memd: <call>(): <error> 0x<p> (caller 0x<caller>)" and aborts if
// MEMD_ABORT_ON_ERROR=1. Counts every report (error_count()).
void report_heap_error(HeapError error, const char* call, const void* p, const void* caller);

unsigned long error_count();

// Writes "memd: <name>=<value>: not <takes>; ignored" (the caller checks
// MEMD_QUIET): a setting that does not parse, whose default stands.
void report_bad_setting(const char* name, const char* value, const char* takes);

// Writes "memd: region <name>: the roots lock has been held longer than <ms>
// ms (a process holding it may be stopped); the call fails with ETIMEDOUT"
// (unless MEMD_QUIET=1).
void report_roots_lock_timeout(const char* region, uint64_t ms);

// Writes "memd: address space limited; the process heap reserves <N> MiB"
// (unless MEMD_QUIET=1): the process heap got less than it asked for.
void report_reserve_reduced(size_t bytes);

}  // namespace memd::region
