// What a region (or a process heap) reports of itself: objects, bytes and
// pages. A plain struct with no dependency, so that the public headers
// (region/region.h, client/heap.h) can return it without pulling in the heap.
#pragma once

#include <cstddef>

namespace memd::heap {

// Vmalloc's vmstat (busy and free objects and bytes) plus the page view.
struct RegionStats {
  size_t busy_objects = 0, busy_bytes = 0;  // live objects, their usable bytes
  size_t free_objects = 0, free_bytes = 0;  // free space inside blocks
  size_t sampled_objects = 0;               // live objects marked as allocation samples
  size_t segregated_blocks = 0, large_blocks = 0, huge_objects = 0;
  size_t pages_committed = 0;   // data pages handed to the page heap (its backing object holds them)
  size_t pages_in_use = 0;      // in blocks and huge objects
  size_t pages_owned = 0;       // in blocks a thread heap or a client's stash holds now
  size_t pages_dirty = 0;       // free, possibly resident
  size_t pages_discarded = 0;   // free and given back (or never touched)
  size_t discard_calls = 0;     // ranges given back since creation
  size_t pages_discarded_total = 0;
  size_t pages_moved = 0;       // of huge objects realloc moved by remapping, not copying (this process)
};

}  // namespace memd::heap
