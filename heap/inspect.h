// Whole-region walks: statistics, the consistency check, and pointer queries.
// They read metadata written by other threads; exact only while the region is
// quiescent, never unsafe. Data-plane code: no allocation.
#pragma once

#include <cstddef>

#include "heap/layout.h"
#include "heap/region_stats.h"
#include "heap/size_class.h"

namespace memd::heap {

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
// If p is the start of a live object, its usable bytes (from the
// descriptors alone, no thread heap: for read-only views); else 0.
size_t region_object_bytes(const Region& r, const SizeClasses& classes, const void* p);
// The same without the walk of a segregated block's free lists: the start of
// the slot p is in, live or free (large and huge objects: as above). For a
// caller that knows by other means whether the slot holds its object (the
// debug method's header).
void* region_object_slot(const Region& r, const SizeClasses& classes, const void* p);

// Calls fn(context, start) for each object slot that may hold a live object:
// every slot a segregated block has handed out (live or since freed: the
// caller tells them apart by what it wrote there), every busy chunk of a
// large block, every live huge run. For the debug method's check of all its
// blocks in a shared region; exact only while the region is quiescent,
// never unsafe.
void region_for_each_slot(const Region& r, const SizeClasses& classes, void (*fn)(void* context, char* start),
                          void* context);

}  // namespace memd::heap
