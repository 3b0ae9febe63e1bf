// Which cumulative counters a client reports the daemon believes.
//
// A client's counters only grow, and its report carries their values since
// it started (or since it opened a region, under a new instance). The
// daemon exports them, summed, as Prometheus counters: one value that goes
// back or leaps would make every rate() and increase() over the target
// wrong. So a value is refused (and the one before it stands) when it is
//   - above 2^62 (kMaxCounter): no process allocates 4 EiB, nor 2^62
//     objects (146 years at one a nanosecond);
//   - below the value before it of the same heap instance (a counter went
//     back);
//   - more than the fastest possible rate over the time since the value
//     before it was taken (plus a second of slack): 2^46 bytes (64 TiB) or
//     2^36 events a second, far above what a machine's threads can
//     allocate, even untouched huge objects. A heap instance's first value
//     in a session is only held to the first rule when the session has not
//     reported that heap before (counts since the client started, which
//     may be long ago); a new instance of a heap it reported counts from
//     zero since then.
// Sums saturate rather than wrap, for the same reason.
#pragma once

#include <cstdint>
#include <optional>

namespace memd::daemon {

inline constexpr uint64_t kMaxCounter = uint64_t{1} << 62;
inline constexpr uint64_t kMaxBytesPerSecond = uint64_t{1} << 46;
inline constexpr uint64_t kMaxEventsPerSecond = uint64_t{1} << 36;

inline uint64_t saturating_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

struct ClassTotals {
  uint64_t allocations = 0, frees = 0, allocated_bytes = 0, freed_bytes = 0;
  void add(const ClassTotals& o) {
    allocations = saturating_add(allocations, o.allocations);
    frees = saturating_add(frees, o.frees);
    allocated_bytes = saturating_add(allocated_bytes, o.allocated_bytes);
    freed_bytes = saturating_add(freed_bytes, o.freed_bytes);
  }
};

enum class CounterVerdict { kOk, kDecreased, kTooLarge, kJump };

// A value reported `elapsed_ms` after `previous` (nullopt: none to compare
// with) of a counter that grows by at most `max_per_second`.
CounterVerdict check_counter(std::optional<uint64_t> previous, uint64_t now, uint64_t elapsed_ms,
                             uint64_t max_per_second);
// The four counters of a size class: the first verdict that is not kOk.
CounterVerdict check_class(const std::optional<ClassTotals>& previous, const ClassTotals& now, uint64_t elapsed_ms);

}  // namespace memd::daemon
