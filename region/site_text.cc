#include "region/site_text.h"

#include <dlfcn.h>

#include <cstdint>

namespace memd::region {

void add_code_address(region::Line& l, const void* pc) {
  Dl_info info;
  if (pc != nullptr && dladdr(pc, &info) != 0 && info.dli_fname != nullptr) {
    l.add(info.dli_fname[0] != '\0' ? info.dli_fname : "(main program)");
    l.add("+");
    l.add_hex_value(reinterpret_cast<uintptr_t>(pc) - reinterpret_cast<uintptr_t>(info.dli_fbase));
  } else {
    l.add_hex(pc);
  }
}

void add_site(region::Line& l, const heap::DebugSite& site) {
  if (site.file == nullptr) {
    add_code_address(l, site.pc);
    return;
  }
  l.add(site.file);
  l.add(",");
  l.add_decimal(site.line);
}

}  // namespace memd::region
