#include "tools/replay/trace_format.h"

#include <unordered_map>

#include "absl/strings/str_cat.h"

namespace memd::replay {
namespace {

// Digits of `base` only, no sign, no overflow.
bool parse_number(std::string_view text, unsigned base, uint64_t* out) {
  if (text.empty() || text.size() > 20) return false;
  uint64_t v = 0;
  for (char c : text) {
    unsigned d;
    if (c >= '0' && c <= '9') d = static_cast<unsigned>(c - '0');
    else if (base == 16 && c >= 'a' && c <= 'f') d = static_cast<unsigned>(c - 'a' + 10);
    else if (base == 16 && c >= 'A' && c <= 'F') d = static_cast<unsigned>(c - 'A' + 10);
    else return false;
    if (v > (UINT64_MAX - d) / base) return false;
    v = v * base + d;
  }
  *out = v;
  return true;
}

bool parse_hex(std::string_view text, uint64_t* out) {
  if (text.size() < 3 || text[0] != '0' || (text[1] != 'x' && text[1] != 'X')) return false;
  return parse_number(text.substr(2), 16, out);
}

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t at = text.find(sep, start);
    if (at == std::string_view::npos) {
      out.push_back(text.substr(start));
      return out;
    }
    out.push_back(text.substr(start, at - start));
    start = at + 1;
  }
}

std::string quoted(std::string_view text) { return absl::StrCat("\"", std::string(text.substr(0, 40)), "\""); }

}  // namespace

absl::StatusOr<TraceCall> parse_trace_line(std::string_view line) {
  std::vector<std::string_view> f = split(line, ':');
  // Eight fields and the empty one after the last ':'. A site may hold ':'
  // only in a file name, which the format does not allow for.
  if (f.size() != 9 || !f[8].empty()) {
    return absl::InvalidArgumentError(absl::StrCat("expected 8 fields ending in ':', found ", f.size() - 1));
  }
  TraceCall c;
  if (!parse_hex(f[0], &c.old_block)) return absl::InvalidArgumentError(absl::StrCat("old block ", quoted(f[0]), " is not 0x..."));
  if (!parse_hex(f[1], &c.new_block)) return absl::InvalidArgumentError(absl::StrCat("new block ", quoted(f[1]), " is not 0x..."));
  if (!parse_number(f[2], 10, &c.size)) return absl::InvalidArgumentError(absl::StrCat("size ", quoted(f[2]), " is not a number"));
  if (c.old_block == 0 && c.new_block == 0) return absl::InvalidArgumentError("a call with neither an old nor a new block");
  uint64_t number;
  if (!parse_number(f[6], 10, &number) || !parse_number(f[7], 10, &number)) {
    return absl::InvalidArgumentError("thread and time must be numbers");
  }
  return c;
}

absl::StatusOr<Replay> read_trace(std::string_view text) {
  Replay r;
  std::unordered_map<uint64_t, uint32_t> live;  // block address -> slot
  std::vector<uint32_t> free_slots;
  auto take_slot = [&] {
    if (!free_slots.empty()) {
      uint32_t s = free_slots.back();
      free_slots.pop_back();
      return s;
    }
    return r.slots++;
  };
  uint64_t n = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++n;
    if (line.empty()) continue;
    absl::StatusOr<TraceCall> c = parse_trace_line(line);
    if (!c.ok()) return absl::InvalidArgumentError(absl::StrCat("line ", n, ": ", c.status().message()));
    uint32_t slot = 0;
    bool known = true;
    if (c->old_block != 0) {
      auto it = live.find(c->old_block);
      known = it != live.end();
      if (known) {
        slot = it->second;
        live.erase(it);
      }
    }
    if (c->new_block != 0 && live.count(c->new_block) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", n, ": block 0x", absl::Hex(c->new_block), " returned while still live"));
    }
    if (!known) {
      // A block from before the trace: a resize of it becomes an allocation.
      ++r.skipped;
      if (c->new_block == 0) continue;
      slot = take_slot();
      r.ops.push_back({ReplayOp::kAlloc, slot, c->size});
      live[c->new_block] = slot;
      continue;
    }
    if (c->old_block == 0) {
      slot = take_slot();
      r.ops.push_back({ReplayOp::kAlloc, slot, c->size});
      live[c->new_block] = slot;
    } else if (c->new_block == 0) {
      r.ops.push_back({ReplayOp::kFree, slot, 0});
      free_slots.push_back(slot);
    } else {
      r.ops.push_back({ReplayOp::kResize, slot, c->size});
      live[c->new_block] = slot;
    }
  }
  return r;
}

}  // namespace memd::replay
