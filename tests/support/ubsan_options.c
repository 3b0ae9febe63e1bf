/* UBSan's settings for every program of the AddressSanitizer build (linked
 * into each by the top CMakeLists.txt).
 *
 * The vptr check is recoverable in that build, and fatal here, except in a
 * process started with MEMD_UBSAN_VPTR_REPORT_ONLY set. Why: the check
 * probes the object's vtable through a pipe (the sanitizer runtime's
 * IsAccessibleMemoryRange), and in a process at its descriptor limit pipe()
 * fails, so the first check of each type reports "invalid vptr" and
 * "<memory cannot be printed>" for an object that is sound. The daemon
 * tests that hold memd at its limit on purpose set the variable and check
 * that every report in its log is of that kind; AddressSanitizer still
 * checks every access there.
 *
 * A function rather than UBSAN_OPTIONS: the runtime reads its settings at
 * its first report, and at the descriptor limit it cannot read the
 * environment from /proc then; getenv reads it from memory. */
#include <stdlib.h>

const char* __ubsan_default_options(void) {
  return getenv("MEMD_UBSAN_VPTR_REPORT_ONLY") != NULL ? "halt_on_error=0:print_stacktrace=1"
                                                         : "halt_on_error=1:print_stacktrace=1";
}
