// Reports of heap errors (invalid pointer, double free) on stderr, formatted
// into a stack buffer: no malloc, usable from inside malloc. Each report
// names the address and the caller's return address.
#pragma once

namespace memd::client {

enum class HeapError { kInvalidPointer, kDoubleFree };

// Writes "memd: <call>(): <error> 0x<p> (caller 0x<caller>)" and aborts if
// MEMD_ABORT_ON_ERROR=1. Counts every report (error_count()).
void report_heap_error(HeapError error, const char* call, const void* p, const void* caller);

unsigned long error_count();

}  // namespace memd::client
