// The page-heap owner of a region: the one writer of its page-level metadata
// (page descriptors, free page runs) and the keeper of its abandoned blocks.
// Everything runs under one lock, taken only on slow paths (a new block, an
// empty block returned, a huge object); discarding pages happens outside it.
//
// As a BlockSource it serves thread heaps of its own process directly. For a
// shared region the same calls serve other processes' leases (region_owner.h).
//
// Data-plane code: no exceptions and no malloc, so the malloc shim can run on
// it; failures are kNoPage/false with errno.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "heap/block_source.h"
#include "heap/inspect.h"
#include "heap/layout.h"
#include "heap/memory_source.h"
#include "heap/page_heap.h"
#include "heap/size_class.h"

namespace memd::region {

class PageHeapOwner final : public heap::BlockSource {
 public:
  // Takes charge of the formatted region `r` whose memory is `source`.
  void init(heap::MemorySource* source, const heap::Region& r);

  const heap::Region& region() const { return region_; }
  const heap::SizeClasses& classes() const { return classes_; }
  heap::MemorySource* source() const { return source_; }

  // BlockSource. acquire adopts an abandoned block before taking fresh pages.
  heap::AcquiredBlock acquire(heap::PageKind kind, uint16_t cls, heap::OwnerId owner) override;
  void release(heap::PageIndex block) override;
  void abandon(heap::PageIndex block) override;
  heap::AcquiredBlock acquire_huge(heap::PageCount pages, heap::PageCount align) override;
  void release_huge(heap::PageIndex first) override;
  bool resize_huge(heap::PageIndex first, heap::PageCount want, bool* zeroed) override;
  // Anonymous memory only: a shared object's discarded range must get its
  // backing again before it is written, which could fail on a full file
  // system after the caller was promised zeros.
  bool zero_huge(heap::PageIndex first, heap::PageCount pages) override;
  // Where the source can move pages (MemorySource::move); counted in pages_moved().
  bool move_huge(heap::PageIndex from, heap::PageIndex to, heap::PageCount pages) override;
  uint64_t pages_moved() const { return pages_moved_.load(std::memory_order_relaxed); }
  // A shared region (its clients lease from the same free pages) keeps one.
  uint32_t huge_runs_kept() const override { return source_->commits_on_use() ? 1 : 8; }
  // Anonymous memory: private to this process, and never recovered.
  bool parks_empty_blocks() const override { return !source_->commits_on_use(); }

  // Discards every dirty free page now, then (with `trim_tail`) gives the
  // free tail back (page_heap_trim: a shared object shrinks). Vmalloc's
  // compact, page part.
  void purge_all(bool trim_tail = true);
  // Pages given back by shrinking the backing object since this owner began.
  uint64_t pages_trimmed() const { return pages_trimmed_.load(std::memory_order_relaxed); }
  // Collects remote frees into abandoned blocks; releases the empty ones.
  void sweep_abandoned();
  size_t abandoned_blocks() const { return abandoned_count_.load(std::memory_order_relaxed); }
  // The abandoned lists, for checks: one per segregated class, the last for
  // large blocks. Their links live in the region, where any process of it
  // can write; every walk here is bounded and stops at a link that does not
  // name an ownerless block (the rest of the list is cut, and counted).
  static constexpr uint32_t kAbandonedLists = heap::kMaxSegregatedClasses + 1;
  heap::PageIndex abandoned_head(uint32_t list) const { return abandoned_[list]; }
  uint64_t abandoned_lists_cut() const { return lists_cut_.load(std::memory_order_relaxed); }
  // Walks every block. Exact when no other thread allocates meanwhile.
  heap::RegionStats stat();
  // Verifies every invariant of the region; false and a message if broken.
  bool check(char* message, size_t message_size, bool skip_owned_blocks = false, uint32_t* skipped = nullptr);
  // Frees every block and huge object at once. REQUIRES: every thread heap
  // of the region has been reset.
  void free_everything();

  // fork(): hold the lock across it so the child never sees it taken.
  void lock() { pthread_mutex_lock(&lock_); }
  void unlock() { pthread_mutex_unlock(&lock_); }
  void reinit_lock_in_child();

 private:
  // page_heap_alloc, and if it finds no run, again after discarding every
  // dirty run. REQUIRES: the lock (released and taken again on the retry).
  heap::RunAllocation alloc_run_locked(heap::PageCount pages, heap::PageKind kind, uint16_t cls,
                                       heap::PageCount align);
  void maybe_purge_locked_then_unlock(uint32_t now_ms);
  // Discards one batch of dirty runs beyond `limit` pages or older than
  // `decay` ms, outside the lock. REQUIRES: the lock; releases it. Returns
  // the pages discarded (0: nothing was).
  uint64_t purge_batch_locked_then_unlock(uint32_t now_ms, uint32_t limit, uint32_t decay);
  void sweep_abandoned_locked(uint32_t now_ms);
  void sweep_if_hinted_locked(uint32_t now_ms);
  uint32_t purge_limit_pages(uint32_t now_ms);
  void discard_runs(const heap::PurgeBatch& batch);
  void finish_purge_locked(heap::PurgeBatch* batch);
  bool under_memory_pressure(uint32_t now_ms);
  heap::PageIndex* abandoned_list(heap::PageKind kind, uint16_t cls);
  // Whether `p` may stand on an abandoned list: an ownerless segregated or
  // large block of the region.
  bool listable(heap::PageIndex p) const;
  // Cuts an abandoned list at `link` (a cycle or a link overwritten).
  void cut_list_locked(heap::PageIndex* link);

  pthread_mutex_t lock_ = PTHREAD_MUTEX_INITIALIZER;
  heap::MemorySource* source_ = nullptr;
  std::atomic<uint64_t> pages_moved_{0};
  std::atomic<uint64_t> pages_trimmed_{0};
  heap::Region region_;
  heap::SizeClasses classes_{heap::HeapParams{}};
  heap::PageIndex abandoned_[heap::kMaxSegregatedClasses + 1];  // last: large blocks
  std::atomic<uint32_t> abandoned_count_{0};
  std::atomic<uint64_t> lists_cut_{0};
  uint32_t swept_hint_ = 0;  // abandoned_frees at the last sweep
  uint32_t last_pressure_check_ms_ = 0;
  uint32_t refault_decayed_ms_ = 0;
  // The most pages in use lately: the high mark of in_use_pages, halved
  // toward the present with the refaults (purge_limit_pages).
  uint32_t recent_peak_pages_ = 0;
  bool pressure_ = false;
};

// Monotonic milliseconds (coarse clock: a vDSO read, no syscall).
uint32_t now_ms();

}  // namespace memd::region
