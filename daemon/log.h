// The daemon's log: one line per event on stderr, with a UTC timestamp and a
// level, so that journald and a terminal both read it. Lines say what the
// daemon did and to whom ("session 3 (pid 812, uid 1000) opened region x").
#pragma once

#include <string_view>

#include "absl/strings/str_cat.h"

namespace memd::daemon {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void set_log_level(LogLevel level);
bool log_enabled(LogLevel level);
void log_line(LogLevel level, std::string_view text);

namespace log_detail {
// Abseil 20220623 has its own string_view: convert the standard one.
template <class T>
const T& arg(const T& v) { return v; }
inline absl::string_view arg(std::string_view v) { return {v.data(), v.size()}; }
}  // namespace log_detail

template <class... Args>
void log_info(const Args&... args) {
  if (log_enabled(LogLevel::kInfo)) log_line(LogLevel::kInfo, absl::StrCat(log_detail::arg(args)...));
}
template <class... Args>
void log_warning(const Args&... args) {
  if (log_enabled(LogLevel::kWarning)) log_line(LogLevel::kWarning, absl::StrCat(log_detail::arg(args)...));
}
template <class... Args>
void log_error(const Args&... args) {
  if (log_enabled(LogLevel::kError)) log_line(LogLevel::kError, absl::StrCat(log_detail::arg(args)...));
}
template <class... Args>
void log_debug(const Args&... args) {
  if (log_enabled(LogLevel::kDebug)) log_line(LogLevel::kDebug, absl::StrCat(log_detail::arg(args)...));
}

}  // namespace memd::daemon
