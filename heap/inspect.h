// Whole-region walks: statistics, the consistency check, and pointer queries.
// They read metadata written by other threads; exact only while the region is
// quiescent, never unsafe. Data-plane code: no allocation.
#pragma once

#include <cstddef>

#include "heap/layout.h"
#include "heap/size_class.h"

namespace memd::heap {

// Vmalloc's vmstat (busy and free objects and bytes) plus the page view.
struct RegionStats {
  size_t busy_objects = 0, busy_bytes = 0;  // live objects, their usable bytes
  size_t free_objects = 0, free_bytes = 0;  // free space inside blocks
  size_t sampled_objects = 0;               // live objects marked as allocation samples
  size_t segregated_blocks = 0, large_blocks = 0, huge_objects = 0;
  size_t pages_committed = 0;   // high-water mark of the data pages
  size_t pages_in_use = 0;      // in blocks and huge objects
  size_t pages_owned = 0;       // in blocks a thread heap or a client's stash holds now
  size_t pages_dirty = 0;       // free, possibly resident
  size_t pages_discarded = 0;   // free and given back (or never touched)
  size_t discard_calls = 0;     // ranges given back since creation
  size_t pages_discarded_total = 0;
  size_t pages_moved = 0;       // of huge objects realloc moved by remapping, not copying (this process)
};

RegionStats region_stat(const Region& r, const SizeClasses& classes);

// Walks every page and block and verifies every invariant: descriptors agree
// with blocks, free runs are binned and coalesced, free lists stay in their
// blocks without repeats, counts add up, large chunks tile their blocks.
// On the first violation writes a message naming the page and returns false.
//
// With `skip_owned_blocks`, the inside of a block a thread heap owns now
// (its bump pointer, free list and counts, which that thread changes as it
// allocates) is not inspected, only its descriptors: the check is then exact
// while other processes allocate, as long as the caller holds the page-heap
// lock. *skipped (if given) counts the blocks left out.
bool region_check(const Region& r, const SizeClasses& classes, char* message, size_t size,
                  bool skip_owned_blocks = false, uint32_t* skipped = nullptr);

// If p points into a live object, its start; else nullptr (Vmalloc's vmaddr).
// Walks the block's free lists: exact only while no other thread frees into
// that block.
void* region_object_start(const Region& r, const SizeClasses& classes, const void* p);

}  // namespace memd::heap
