// The profile method's books (Vmalloc's Vmprofile): bytes and objects
// allocated and freed per call site, and the peak of bytes in use, printed
// at exit in the paper's summary form:
//
//   ALLOCATION USAGE SUMMARY:n_alloc=3:n_free=1:s_alloc=21:s_free=5:
//   region=(process):n_alloc=3:n_free=1:s_alloc=21:s_free=5:max_busy=21:extent=4096:
//   file=t.c:n_alloc=2:n_free=1:s_alloc=9:s_free=5:
//       line=4:region=(process):n_alloc=1:n_free=0:s_alloc=4:s_free=0:
//   file=<>:n_alloc=1:n_free=0:s_alloc=12:s_free=0:
//       pc=/usr/lib/x86_64-linux-gnu/libc.so.6+0x8a1b2:region=(process):n_alloc=1:...
//
// A site is a file and line where the program records them
// (client/memd_debug.h); else a return address, listed under file=<> as
// object+offset. A fixed table (no allocation: it runs inside malloc);
// sites past its size are counted under one "other sites" line. Not
// thread-safe: the caller serialises.
#pragma once

#include <cstddef>
#include <cstdint>

#include "heap/debug_block.h"

namespace memd::region {

struct SiteCounts {
  uint64_t n_alloc = 0, n_free = 0, s_alloc = 0, s_free = 0;
  void allocated(uint64_t bytes) { ++n_alloc, s_alloc += bytes; }
  void freed(uint64_t bytes) { ++n_free, s_free += bytes; }
  void add(const SiteCounts& o) {
    n_alloc += o.n_alloc, n_free += o.n_free, s_alloc += o.s_alloc, s_free += o.s_free;
  }
};

class ProfileSites {
 public:
  static constexpr uint32_t kSlots = 8192;  // a power of two
  static constexpr uint32_t kOther = kSlots;  // the index of "other sites"

  // The index of a site's entry, made on first use (kOther when full).
  uint32_t index_of(const heap::DebugSite& site);
  void allocated(uint32_t index, uint64_t bytes);
  void freed(uint32_t index, uint64_t bytes);

  // For a summary of counts kept elsewhere (a shared region's site table,
  // heap/site_table.h): the entry of a site whose return address another
  // process already turned into text (`pc_text`, kept, printed as it is),
  // counts added whole, and the bytes in use now and at most.
  uint32_t index_of_pc_text(const char* pc_text);
  void add_site_counts(uint32_t index, const SiteCounts& counts);
  void set_busy(uint64_t busy, uint64_t max_busy) { busy_ = busy, max_busy_ = max_busy; }

  // Writes the summary to fd; `extent` is the bytes the heap holds.
  void write_summary(int fd, const char* region, uint64_t extent) const;

 private:
  struct Entry {
    heap::DebugSite site;
    const char* pc_text = nullptr;  // names the site instead of site.pc
    bool used = false;
    SiteCounts counts;
  };
  SiteCounts total_;
  uint64_t busy_ = 0, max_busy_ = 0;
  uint32_t entries_ = 0;
  Entry table_[kSlots + 1];
};

}  // namespace memd::region
