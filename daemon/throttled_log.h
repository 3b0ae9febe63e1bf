// A warning that may come thousands of times a second (accept failing at the
// descriptor limit, connections refused by a limit): one line per interval,
// which says how many like it were left out since the last one. One thread
// uses an instance (no lock).
#pragma once

#include <chrono>
#include <cstdint>

#include "daemon/log.h"

namespace memd::daemon {

class ThrottledWarning {
 public:
  using Clock = std::chrono::steady_clock;
  explicit ThrottledWarning(Clock::duration interval = std::chrono::seconds(10)) : interval_(interval) {}

  template <class... Args>
  void warn(const Args&... args) {
    uint64_t left_out = 0;
    if (!due(&left_out)) return;
    if (left_out == 0) {
      log_warning(args...);
    } else {
      log_warning(args..., " (", left_out, " more like it not logged)");
    }
  }

 private:
  // Whether this one is logged; if so, how many were not since the last.
  bool due(uint64_t* left_out);

  const Clock::duration interval_;
  Clock::time_point next_{};
  uint64_t left_out_ = 0;
};

}  // namespace memd::daemon
