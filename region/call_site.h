// The call site a region call is made for, when the caller knows it better
// than the return address does: vmalloc.h's entry points (with their file
// and line under -DVMFL, else their own caller's address) set it for the
// calls they make, so that a debug or profile region names the program's
// line, not vmalloc.cc's. Thread-local; no allocation.
#pragma once

#include "heap/debug_block.h"

namespace memd::region {

// The site set by the innermost live CallSiteScope of this thread, or nullptr.
const heap::DebugSite* current_call_site();

class CallSiteScope {
 public:
  explicit CallSiteScope(const heap::DebugSite& site);
  ~CallSiteScope();
  CallSiteScope(const CallSiteScope&) = delete;
  CallSiteScope& operator=(const CallSiteScope&) = delete;

 private:
  heap::DebugSite site_;
  const heap::DebugSite* outer_;
};

}  // namespace memd::region
