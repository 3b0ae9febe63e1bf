#include "heap/crash_point.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstring>

namespace memd::heap::crash_detail {

std::atomic<int> armed{-1};

namespace {

char armed_name[64];
long armed_pass = 0;
std::atomic<long> passes{0};

void read_environment() {
  const char* spec = getenv("MEMD_CRASH_AT");
  const char* colon = spec != nullptr ? strrchr(spec, ':') : nullptr;
  size_t len = colon != nullptr ? static_cast<size_t>(colon - spec) : 0;
  long n = colon != nullptr ? strtol(colon + 1, nullptr, 10) : 0;
  if (len == 0 || len >= sizeof armed_name || n <= 0) {
    armed.store(0, std::memory_order_relaxed);
    return;
  }
  memcpy(armed_name, spec, len);
  armed_name[len] = '\0';
  armed_pass = n;
  armed.store(1, std::memory_order_release);
}

void say(const char* s) { (void)!write(2, s, strlen(s)); }

}  // namespace

void pass(const char* name) {
  static std::atomic<bool> read{false};
  if (!read.exchange(true)) read_environment();
  if (armed.load(std::memory_order_acquire) != 1 || strcmp(name, armed_name) != 0) return;
  if (passes.fetch_add(1, std::memory_order_acq_rel) + 1 != armed_pass) return;
  say("memd: crash point ");
  say(name);
  say(" reached: exiting as if killed\n");
  _exit(kCrashExitCode);
}

}  // namespace memd::heap::crash_detail
