// Wall-clock time for what the daemon reports (session starts, region
// creation, uptime): unix milliseconds.
#pragma once

#include <time.h>

#include <cstdint>

namespace memd::daemon {

inline uint64_t wall_ms() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000 + uint64_t(ts.tv_nsec) / 1000000;
}

}  // namespace memd::daemon
