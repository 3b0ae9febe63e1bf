#include "daemon/client_counters.h"

namespace memd::daemon {

CounterVerdict check_counter(std::optional<uint64_t> previous, uint64_t now, uint64_t elapsed_ms,
                             uint64_t max_per_second) {
  if (now > kMaxCounter) return CounterVerdict::kTooLarge;
  if (!previous) return CounterVerdict::kOk;
  if (now < *previous) return CounterVerdict::kDecreased;
  const uint64_t seconds = elapsed_ms / 1000 + 1;
  const uint64_t most = seconds > kMaxCounter / max_per_second ? kMaxCounter : seconds * max_per_second;
  return now - *previous > most ? CounterVerdict::kJump : CounterVerdict::kOk;
}

CounterVerdict check_class(const std::optional<ClassTotals>& previous, const ClassTotals& now, uint64_t elapsed_ms) {
  auto prev = [&](uint64_t ClassTotals::*field) -> std::optional<uint64_t> {
    if (!previous) return std::nullopt;
    return (*previous).*field;
  };
  const struct {
    uint64_t ClassTotals::*field;
    uint64_t rate;
  } counters[] = {{&ClassTotals::allocations, kMaxEventsPerSecond},
                  {&ClassTotals::frees, kMaxEventsPerSecond},
                  {&ClassTotals::allocated_bytes, kMaxBytesPerSecond},
                  {&ClassTotals::freed_bytes, kMaxBytesPerSecond}};
  for (const auto& c : counters) {
    CounterVerdict v = check_counter(prev(c.field), now.*(c.field), elapsed_ms, c.rate);
    if (v != CounterVerdict::kOk) return v;
  }
  return CounterVerdict::kOk;
}

}  // namespace memd::daemon
