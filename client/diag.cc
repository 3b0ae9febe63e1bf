#include "client/diag.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "client/options.h"

namespace memd::client {
namespace {

std::atomic<unsigned long> errors{0};

// Appends text to a fixed buffer, truncating.
struct Line {
  char buf[256];
  size_t len = 0;
  void add(const char* s) {
    while (*s && len < sizeof buf - 1) buf[len++] = *s++;
  }
  void add_hex(const void* p) {
    char tmp[2 + 16];
    uintptr_t v = reinterpret_cast<uintptr_t>(p);
    int n = 0;
    do {
      tmp[n++] = "0123456789abcdef"[v & 15];
      v >>= 4;
    } while (v);
    add("0x");
    while (n > 0 && len < sizeof buf - 1) buf[len++] = tmp[--n];
  }
};

const char* describe(HeapError e) {
  switch (e) {
    case HeapError::kInvalidPointer: return "pointer not allocated by memd (or not an object start)";
    case HeapError::kDoubleFree: return "double free of";
  }
  return "error at";
}

}  // namespace

void report_heap_error(HeapError error, const char* call, const void* p, const void* caller) {
  errors.fetch_add(1, std::memory_order_relaxed);
  if (!quiet()) {
    Line line;
    line.add("memd: ");
    line.add(call);
    line.add("(): ");
    line.add(describe(error));
    line.add(" ");
    line.add_hex(p);
    line.add(" (caller ");
    line.add_hex(caller);
    line.add(")\n");
    ssize_t ignored = write(STDERR_FILENO, line.buf, line.len);
    (void)ignored;
  }
  if (abort_on_error()) abort();
}

unsigned long error_count() { return errors.load(std::memory_order_relaxed); }

}  // namespace memd::client
