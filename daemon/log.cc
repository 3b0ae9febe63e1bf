#include "daemon/log.h"

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "daemon/client_text.h"

namespace memd::daemon {
namespace {
std::atomic<int> min_level{static_cast<int>(LogLevel::kInfo)};
constexpr const char* kNames[] = {"debug", "info", "warning", "error"};
constexpr size_t kMaxLineBytes = 16384;
}  // namespace

void set_log_level(LogLevel level) { min_level.store(static_cast<int>(level)); }
bool log_enabled(LogLevel level) { return static_cast<int>(level) >= min_level.load(std::memory_order_relaxed); }

void log_line(LogLevel level, std::string_view text) {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  tm utc;
  gmtime_r(&ts.tv_sec, &utc);
  char stamp[40];
  size_t n = strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(stamp + n, sizeof stamp - n, ".%03ldZ", ts.tv_nsec / 1000000);
  // One write per line: lines of concurrent threads do not interleave.
  // Lines carry what clients sent (programs, names): a newline, a NUL or a
  // bidi override in them must not start or disguise a line of its own.
  std::string line = absl::StrCat(stamp, " memd ", kNames[static_cast<int>(level)], ": ",
                                  client_text(text, kMaxLineBytes), "\n");
  (void)!write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace memd::daemon
