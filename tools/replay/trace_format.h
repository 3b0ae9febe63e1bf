// The trace a method heap writes (docs/trace.md), read back: one call per
// line, "old:new:size:region:method:site:thread:microseconds:". Only the
// first three fields matter to a replay; the rest are checked for presence.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace memd::replay {

struct TraceCall {
  uint64_t old_block = 0;  // 0: an allocation
  uint64_t new_block = 0;  // 0: a free
  uint64_t size = 0;
};

// One line (without its newline). InvalidArgument naming what is wrong.
absl::StatusOr<TraceCall> parse_trace_line(std::string_view line);

// A replay: the calls with blocks numbered by slot (a block's slot is fixed
// from the call that returns it to the call that frees or moves it). Frees
// and resizes of blocks the trace never returned (allocated before it
// started) are left out and counted.
struct ReplayOp {
  enum Kind : uint8_t { kAlloc, kFree, kResize } kind;
  uint32_t slot;
  uint64_t size;
};
struct Replay {
  std::vector<ReplayOp> ops;
  uint32_t slots = 0;
  uint64_t skipped = 0;  // calls on blocks from before the trace
};

// Reads a whole trace: InvalidArgument naming the first bad line ("line N:
// ...") or a trace that frees a block twice without a call between.
absl::StatusOr<Replay> read_trace(std::string_view text);

}  // namespace memd::replay
