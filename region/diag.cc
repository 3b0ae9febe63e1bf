#include "region/diag.h"

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "region/options.h"
#include "region/report_line.h"

namespace memd::region {
namespace {

std::atomic<unsigned long> errors{0};

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
    line.write_out();
  }
  if (abort_on_error()) abort();
}

void report_bad_setting(const char* name, const char* value, const char* takes) {
  Line line;
  line.add("memd: ");
  line.add(name);
  line.add("=");
  line.add(value);
  line.add(": not ");
  line.add(takes);
  line.add("; ignored\n");
  line.write_out();
}

void report_roots_lock_timeout(const char* region, uint64_t ms) {
  if (quiet()) return;
  Line line;
  line.add("memd: region ");
  line.add(region);
  line.add(": the roots lock has been held longer than ");
  line.add_decimal(ms);
  line.add(" ms (a process holding it may be stopped); the call fails with ETIMEDOUT\n");
  line.write_out();
}

void report_reserve_reduced(size_t bytes) {
  if (quiet()) return;
  Line line;
  line.add("memd: address space limited; the process heap reserves ");
  line.add_decimal(bytes >> 20);
  line.add(" MiB\n");
  line.write_out();
}

unsigned long error_count() { return errors.load(std::memory_order_relaxed); }

}  // namespace memd::region
