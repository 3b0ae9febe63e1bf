#include "region/options.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "region/diag.h"

namespace memd::region {
namespace {

struct Option {
  const char* name;          // environment variable
  const char* default_text;  // as documented in the README
  const char* description;
};

constexpr Option kOptions[] = {
    {"MEMD_RESERVE_GB", "64", "address space reserved for the process heap (GiB); memory is committed as used"},
    {"MEMD_MAX_THREADS", "4096", "threads that may hold a thread heap at once"},
    {"MEMD_KEEP_HEAPS", "4", "heaps of exited threads kept whole for the next new threads (at most 16; 0: abandon each at exit)"},
    {"MEMD_DISCARD", "hysteresis", "when empty pages go back to the system: hysteresis, immediate, pressure, never"},
    {"MEMD_DIRTY_FLOOR_MB", "1", "empty memory always kept for reuse before discarding (MiB)"},
    {"MEMD_DIRTY_RATIO", "6", "... or this percentage of the memory in use, if larger"},
    {"MEMD_DIRTY_MAX_MB", "64", "... or up to this much when discarded memory keeps being refaulted"},
    {"MEMD_DIRTY_DECAY_MS", "1000", "empty pages unused this long are discarded"},
    {"MEMD_SMALL_MAX", "120", "largest small object (1-page blocks)"},
    {"MEMD_MEDIUM_MAX", "65536", "largest medium (segregated, headerless) object; a class size"},
    {"MEMD_LARGE_MAX", "65536", "largest large object (best fit in shared blocks; up to 32768, or MEMD_MEDIUM_MAX: none); above: page runs"},
    {"MEMD_LARGE_BLOCK_PAGES", "20", "pages per large-object block (at most 2048)"},
    {"MEMD_PREFAULT", "0", "1: populate fresh blocks and big runs (of the heap and of regions) in one call instead of a fault per page"},
    {"MEMD_THP", "0", "1: transparent huge pages for the process heap (fewer faults and TLB misses, RSS in 2 MiB steps)"},
    {"MEMD_ABORT_ON_ERROR", "0", "1: abort on an invalid or double free instead of reporting it"},
    {"MEMD_QUIET", "0", "1: do not report heap errors on stderr"},
    {"MEMD_TELEMETRY", "", "1: report to memd (default: on for its clients, off for the process heap)"},
    {"MEMD_SAMPLE_BYTES", "524288", "sample one allocation per this many bytes on average; 0: none"},
    {"MEMD_TELEMETRY_INTERVAL_MS", "1000", "how often a client reports"},
    {"MEMD_ROOTS_LOCK_TIMEOUT_MS", "10000", "longest wait for a region's roots lock before a root call fails (ETIMEDOUT)"},
};

const char* default_of(const char* name) {
  for (const Option& o : kOptions) {
    if (std::strcmp(o.name, name) == 0) return o.default_text;
  }
  return "";
}

const char* env_or_default(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : default_of(name);
}

unsigned long number(const char* name) { return std::strtoul(env_or_default(name), nullptr, 10); }

// stderr without stdio: this runs inside the first malloc.
void warn(const char* text) {
  if (quiet()) return;
  ssize_t ignored = write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

bool reported_elsewhere = false;

// The variable's value if set and valid; -1 (and a report) otherwise.
int64_t setting(const char* name, bool (*parse)(std::string_view, uint64_t*), const char* takes) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return -1;
  uint64_t n = 0;
  if (parse(v, &n) && n <= uint64_t{INT64_MAX}) return static_cast<int64_t>(n);
  if (!quiet() && !reported_elsewhere) report_bad_setting(name, v, takes);
  return -1;
}

bool parse_count(std::string_view text, uint64_t* out) {
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return parse_bytes(text, out);
}
bool parse_positive(std::string_view text, uint64_t* out) { return parse_count(text, out) && *out > 0; }

}  // namespace

void settings_reported_elsewhere() { reported_elsewhere = true; }

TelemetrySettings telemetry_settings() {
  TelemetrySettings t;
  int64_t on = setting("MEMD_TELEMETRY", parse_count, "0 or 1");
  t.enabled = on < 0 ? -1 : on != 0;
  t.sample_bytes = setting("MEMD_SAMPLE_BYTES", parse_bytes, "a number of bytes, like 524288 or 512K");
  t.interval_ms = setting("MEMD_TELEMETRY_INTERVAL_MS", parse_positive, "milliseconds, at least 1");
  return t;
}

uint64_t roots_lock_timeout_ms() {
  int64_t ms = setting("MEMD_ROOTS_LOCK_TIMEOUT_MS", parse_positive, "milliseconds, at least 1");
  return ms > 0 ? static_cast<uint64_t>(ms) : std::strtoull(default_of("MEMD_ROOTS_LOCK_TIMEOUT_MS"), nullptr, 10);
}

bool prefault_enabled() { return number("MEMD_PREFAULT") != 0; }

ArenaOptions process_arena_options() {
  ArenaOptions o;
  o.reserve_bytes = size_t{number("MEMD_RESERVE_GB")} << 30;
  o.max_threads = static_cast<uint32_t>(number("MEMD_MAX_THREADS"));
  o.kept_heaps = static_cast<uint32_t>(number("MEMD_KEEP_HEAPS"));
  const char* mode = env_or_default("MEMD_DISCARD");
  if (std::strcmp(mode, "immediate") == 0) o.params.discard_mode = heap::DiscardMode::kImmediate;
  else if (std::strcmp(mode, "pressure") == 0) o.params.discard_mode = heap::DiscardMode::kPressure;
  else if (std::strcmp(mode, "never") == 0) o.params.discard_mode = heap::DiscardMode::kNever;
  o.params.dirty_floor_pages = static_cast<uint32_t>(number("MEMD_DIRTY_FLOOR_MB") * 256);
  o.params.dirty_ratio_percent = static_cast<uint32_t>(number("MEMD_DIRTY_RATIO"));
  o.params.dirty_max_pages = static_cast<uint32_t>(number("MEMD_DIRTY_MAX_MB") * 256);
  o.params.dirty_decay_ms = static_cast<uint32_t>(number("MEMD_DIRTY_DECAY_MS"));
  o.params.small_max = static_cast<uint32_t>(number("MEMD_SMALL_MAX"));
  o.params.medium_max = static_cast<uint32_t>(number("MEMD_MEDIUM_MAX"));
  o.params.large_max = static_cast<uint32_t>(number("MEMD_LARGE_MAX"));
  o.params.large_block_pages = static_cast<uint32_t>(number("MEMD_LARGE_BLOCK_PAGES"));
  o.prefault = prefault_enabled();
  o.huge_pages = number("MEMD_THP") != 0;
  // A bad setting must not take the program down with it: say so, and run
  // with the defaults it would otherwise have had.
  if (!heap::params_valid(o.params)) {
    warn("memd: MEMD_SMALL_MAX/MEDIUM_MAX/LARGE_MAX/LARGE_BLOCK_PAGES out of range "
         "(small up to 512 bytes, medium a class size up to 65536, large objects up to 32768 bytes "
         "or MEMD_LARGE_MAX equal to MEDIUM_MAX for none, blocks up to 2048 pages, boundaries in order); "
         "using the defaults\n");
    heap::HeapParams defaults;
    o.params.small_max = defaults.small_max;
    o.params.medium_max = defaults.medium_max;
    o.params.large_max = defaults.large_max;
    o.params.small_block_pages = defaults.small_block_pages;
    o.params.medium_block_pages = defaults.medium_block_pages;
    o.params.large_block_pages = defaults.large_block_pages;
  }
  if (o.max_threads == 0 || o.max_threads > heap::kMaxOwnerSlots) {
    warn("memd: MEMD_MAX_THREADS must be 1..4096; using 4096\n");
    o.max_threads = heap::kMaxOwnerSlots;
  }
  if (o.reserve_bytes == 0) {
    warn("memd: MEMD_RESERVE_GB must be at least 1; using 64\n");
    o.reserve_bytes = size_t{64} << 30;
  }
  return o;
}

bool abort_on_error() { return number("MEMD_ABORT_ON_ERROR") != 0; }
bool quiet() { return number("MEMD_QUIET") != 0; }

bool parse_bytes(std::string_view text, uint64_t* out) {
  int shift = 0;
  if (!text.empty()) {
    switch (text.back()) {
      case 'k': case 'K': shift = 10; break;
      case 'm': case 'M': shift = 20; break;
      case 'g': case 'G': shift = 30; break;
      case 't': case 'T': shift = 40; break;
      default: break;
    }
    if (shift != 0) text.remove_suffix(1);
  }
  if (text.empty()) return false;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;  // no sign, no space
    if (v > (UINT64_MAX - static_cast<uint64_t>(c - '0')) / 10) return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > (UINT64_MAX >> shift)) return false;
  *out = v << shift;
  return true;
}

}  // namespace memd::region
