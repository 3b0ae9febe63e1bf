// Crash points: named places where a test makes the process die at the Nth
// pass, as `kill -9` would but at an exact instant, to prove that recovery
// from there loses nothing published and leaves a heap that passes check.
//
// Armed by MEMD_CRASH_AT=name:N in the environment (read once, at the first
// pass of any point); the process then _exits with kCrashExitCode at the Nth
// pass of `name`. Unarmed, a point costs one relaxed load of a global flag,
// and points stand only on slow paths (page heap, recovery, lease service,
// daemon), never on the inline path of malloc and free. No allocation: the
// shim may pass one.
#pragma once

#include <atomic>

namespace memd::heap {

inline constexpr int kCrashExitCode = 86;

namespace crash_detail {
// -1: not read yet; 0: no point armed; 1: one is.
extern std::atomic<int> armed;
void pass(const char* name);
}  // namespace crash_detail

inline void crash_point(const char* name) {
  if (__builtin_expect(crash_detail::armed.load(std::memory_order_relaxed) != 0, 0)) crash_detail::pass(name);
}

}  // namespace memd::heap
