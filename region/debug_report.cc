#include "region/debug_report.h"

#include "region/site_text.h"

namespace memd::region {

Line start_debug_report(const char* kind, const char* label, const void* block) {
  Line l;
  l.add("memd: ");
  l.add(kind);
  l.add(":region=");
  l.add(label);
  l.add(":block=");
  l.add_hex(block);
  l.add(":");
  return l;
}

void write_debug_alert(const char* label, const void* block, uint64_t size, const char* what,
                       const heap::DebugSite& detected) {
  Line l = start_debug_report("alert", label, block);
  l.add("size=");
  l.add_decimal(size);
  l.add(":");
  l.add(what);
  l.add(":detected at=");
  add_site(l, detected);
  l.add(":\n");
  l.write_out();
}

}  // namespace memd::region
