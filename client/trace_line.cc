#include "client/trace_line.h"

#include <unistd.h>

#include <ctime>

#include "region/site_text.h"
#include "region/report_line.h"

namespace memd::client {

uint64_t monotonic_us() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000 + static_cast<uint64_t>(t.tv_nsec) / 1000;
}

void write_trace_line(int fd, const void* old, const void* now, uint64_t size, const char* region,
                      const char* method, const heap::DebugSite& site, uint64_t since_us) {
  region::Line l;
  l.add_hex(old);
  l.add(":");
  l.add_hex(now);
  l.add(":");
  l.add_decimal(size);
  l.add(":");
  l.add(region);
  l.add(":");
  l.add(method);
  l.add(":");
  region::add_site(l, site);
  l.add(":");
  l.add_decimal(static_cast<uint64_t>(gettid()));
  l.add(":");
  l.add_decimal(monotonic_us() - since_us);
  l.add(":\n");
  l.write_to(fd);
}

}  // namespace memd::client
