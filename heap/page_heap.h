// The page heap: runs of free pages inside a region, the page descriptor
// table, and the decisions of when empty pages go back to the system.
//
// Free runs are kept in two sets of bins, dirty (pages may be resident) and
// clean (never used, or discarded: they read as zero). Allocation prefers a
// dirty run, so reuse costs no page faults; neighbours of the same state
// coalesce at once. Dirty runs also sit on an LRU list, oldest first, from
// which the discard policy (discard_policy.h) picks what to give back, in
// whole runs — one system call per range, never per page.
//
// REQUIRES (every function): the caller is the region's page-heap owner —
// within a process, the holder of the arena lock; for a shared region, the
// daemon.
#pragma once

#include <cstdint>

#include "heap/layout.h"
#include "heap/memory_source.h"

namespace memd::heap {

struct RunAllocation {
  PageIndex first = kNoPage;
  bool zeroed = false;  // every page reads as zero
};

// Takes `n` pages for a block or huge object of `kind` (and class `cls`),
// writing their descriptors. `align` > 1 asks for a first page whose address
// in this process's mapping is a multiple of `align` pages. Grows the region when no free run fits; fails (kNoPage,
// errno ENOMEM) when the reservation or the source is exhausted.
RunAllocation page_heap_alloc(const Region& r, MemorySource& source, PageCount n,
                              PageKind kind, uint16_t cls, PageCount align = {1});

// Gives back the pages of a block or huge object; they become a dirty run.
void page_heap_free(const Region& r, PageIndex first, PageCount n, uint32_t now_ms);

// Grows the run [first, first + have) to `want` pages in place if the pages
// after it are free. Returns whether it did; `zeroed` tells if the new pages
// read as zero.
bool page_heap_extend(const Region& r, MemorySource& source, PageIndex first, PageCount have,
                      PageCount want, bool* zeroed);

// Shrinks the run [first, first + have) to `want` pages, freeing the tail.
void page_heap_shrink(const Region& r, PageIndex first, PageCount have, PageCount want,
                      uint32_t now_ms);

// Gives the free run at the top of the committed pages back to the source
// (MemorySource::shrink: a shared object gets shorter) and lowers the
// committed mark below it. Returns the pages given back (0 if the top page
// is in use, or the source cannot shrink). Vmalloc's compact, growth's undo.
PageCount page_heap_trim(const Region& r, MemorySource& source);

// Recovery: forgets every free run and counter, keeping the committed mark.
void page_heap_reset(const Region& r);
// Recovery: records [first, first + n) as free pages in `state` (a RunState),
// writing every page's descriptor, merging with free neighbours.
void page_heap_add_free(const Region& r, PageIndex first, PageCount n, uint8_t state);
// Recovery: counts `n` pages as in use (their descriptors are already right).
void page_heap_count_in_use(const Region& r, PageCount n);

// Dirty runs taken out of the heap to be discarded outside the lock.
struct PurgeBatch {
  static constexpr uint32_t kMaxRuns = 32;
  PageIndex first[kMaxRuns];
  PageCount pages[kMaxRuns];
  uint32_t count = 0;
};

// Detaches the dirty runs that must be discarded now: while dirty pages exceed
// `limit_pages`, and every run older than `decay_ms`. They stay unavailable
// until page_heap_finish_purge.
void page_heap_select_purge(const Region& r, uint32_t now_ms, uint32_t limit_pages,
                            uint32_t decay_ms, PurgeBatch* batch);

// Returns discarded runs to the heap as clean runs. Each batch entry is
// updated to the run it became part of after coalescing.
void page_heap_finish_purge(const Region& r, PurgeBatch* batch);

// Bytes of `source` offsets for a data run (for discard and persist calls).
inline size_t data_offset_of(const Region& r, PageIndex p) {
  return static_cast<size_t>(r.data - r.base) + (size_t{p.value} << kPageShift);
}

}  // namespace memd::heap
