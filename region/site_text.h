// A call site as the debug, profile and trace output writes it: "file,line"
// where the program recorded them, else a return address as
// "object+0xoffset" (addr2line -e object offset names the line). No malloc.
#pragma once

#include "heap/debug_block.h"
#include "region/report_line.h"

namespace memd::region {

void add_code_address(region::Line& l, const void* pc);
void add_site(region::Line& l, const heap::DebugSite& site);

}  // namespace memd::region
