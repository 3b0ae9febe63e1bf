// Fuzz target: reading an allocation trace (docs/trace.md), the file
// memdctl replay is given. Any bytes must give a replay or an error naming
// the line; a replay must be self-consistent: every free and resize names a
// slot an earlier call filled and no later call emptied, and slots stay
// below the count.
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "tools/replay/trace_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<memd::replay::Replay> r = memd::replay::read_trace(text);
  if (!r.ok()) {
    if (r.status().message().empty()) std::abort();
    return 0;
  }
  std::vector<bool> filled(r->slots, false);
  for (const memd::replay::ReplayOp& op : r->ops) {
    if (op.slot >= r->slots) std::abort();
    switch (op.kind) {
      case memd::replay::ReplayOp::kAlloc:
        if (filled[op.slot]) std::abort();
        filled[op.slot] = true;
        break;
      case memd::replay::ReplayOp::kFree:
        if (!filled[op.slot]) std::abort();
        filled[op.slot] = false;
        break;
      case memd::replay::ReplayOp::kResize:
        if (!filled[op.slot]) std::abort();
        break;
    }
  }
  return 0;
}
