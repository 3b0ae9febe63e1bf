// One line of an allocation trace (docs/trace.md), written with one write(2)
// so that lines of threads and processes appending to one file never mix:
//
//   old:new:size:region:method:site:thread:microseconds:
//
// `old` 0x0 is an allocation, `new` 0x0 a free. No malloc: the shim's
// malloc writes it.
#pragma once

#include <cstdint>

#include "heap/debug_block.h"

namespace memd::client {

// Microseconds of the monotonic clock (a trace's times count from a start).
uint64_t monotonic_us();

void write_trace_line(int fd, const void* old, const void* now, uint64_t size, const char* region,
                      const char* method, const heap::DebugSite& site, uint64_t since_us);

}  // namespace memd::client
