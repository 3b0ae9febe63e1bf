#include "region/page_heap_owner.h"

#include <sys/sysinfo.h>
#include <time.h>

#include <algorithm>
#include <cerrno>

#include "heap/block.h"
#include "heap/large_heap.h"
#include "heap/remote_free.h"

#if defined(MEMD_SANITIZER_ADDRESS)
#include <sanitizer/asan_interface.h>
#endif

namespace memd::region {

using heap::AcquiredBlock;
using heap::BlockDesc;
using heap::kNoPage;
using heap::PageCount;
using heap::PageIndex;
using heap::PageKind;

uint32_t now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<uint32_t>(ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

namespace {

// In AddressSanitizer builds, pages the page heap holds free are poisoned,
// so that any write the heap (or a program) makes into a released block is
// reported where it happens, whether or not the pages were reused yet.
#if defined(MEMD_SANITIZER_ADDRESS)
// `n` may be a length a client overwrote: poisoning stops at the mapping's end.
void poison(const heap::Region& r, PageIndex first, PageCount n) {
  if (first.value >= r.page_limit()) return;
  n.value = std::min(n.value, r.page_limit() - first.value);
  ASAN_POISON_MEMORY_REGION(r.page_address(first), n.bytes());
}
void unpoison(const heap::Region& r, PageIndex first, PageCount n) {
  ASAN_UNPOISON_MEMORY_REGION(r.page_address(first), n.bytes());
}
#else
void poison(const heap::Region&, PageIndex, PageCount) {}
void unpoison(const heap::Region&, PageIndex, PageCount) {}
#endif

}  // namespace

void PageHeapOwner::init(heap::MemorySource* source, const heap::Region& r) {
  source_ = source;
  region_ = r;
  classes_ = heap::SizeClasses(r.header->params);
  std::fill(std::begin(abandoned_), std::end(abandoned_), kNoPage);
}

namespace {
// How far down an abandoned list acquire looks for a block with room, so
// that a long list of full blocks never holds the lock for long.
constexpr int kAdoptionScan = 16;
}  // namespace

PageIndex* PageHeapOwner::abandoned_list(PageKind kind, uint16_t cls) {
  return kind == PageKind::kLarge ? &abandoned_[heap::kMaxSegregatedClasses] : &abandoned_[cls];
}

bool PageHeapOwner::listable(PageIndex p) const {
  if (p.value >= region_.committed_pages()) return false;
  heap::PageDesc d = region_.page(p);
  return d.block == p.value && (d.kind == PageKind::kSegregated || d.kind == PageKind::kLarge) &&
         region_.block(p).owner_word.load(std::memory_order_acquire) == 0;
}

void PageHeapOwner::cut_list_locked(PageIndex* link) {
  *link = kNoPage;
  lists_cut_.fetch_add(1, std::memory_order_relaxed);
  // The count is of listed blocks: recount what is left.
  uint32_t left = 0;
  uint32_t bound = region_.committed_pages();
  for (PageIndex head : abandoned_) {
    for (uint32_t steps = 0; head.value < bound && steps < bound; ++steps, ++left) head = region_.block(head).next;
  }
  abandoned_count_.store(left, std::memory_order_relaxed);
}

heap::RunAllocation PageHeapOwner::alloc_run_locked(PageCount pages, PageKind kind, uint16_t cls, PageCount align) {
  heap::RunAllocation run = heap::page_heap_alloc(region_, *source_, pages, kind, cls, align);
  if (run.first != kNoPage || region_.header->page_heap.dirty_pages == 0) return run;
  // Dirty and discarded free runs do not merge (a run is one or the other),
  // so free space that is ample in all may be split into runs too short for
  // the request while the reservation has no more to give. Discarding the
  // dirty ones merges them with their neighbours: look again after that.
  unlock();
  purge_all(/*trim_tail=*/false);
  lock();
  return heap::page_heap_alloc(region_, *source_, pages, kind, cls, align);
}

AcquiredBlock PageHeapOwner::acquire(PageKind kind, uint16_t cls, heap::OwnerId owner) {
  lock();
  // Adopt before taking fresh pages: reuses the free space of dead threads
  // and processes. A segregated block that is full (and has no remote frees
  // waiting) has none to give: adopting it would only cost its adopter
  // another lease; it stays listed until frees reach it.
  PageIndex* link = abandoned_list(kind, cls);
  for (int looked = 0; *link != kNoPage && looked < kAdoptionScan; ++looked) {
    PageIndex p = *link;
    if (!listable(p) || region_.block(p).kind != kind || (kind == PageKind::kSegregated && region_.block(p).cls != cls)) {
      cut_list_locked(link);
      break;
    }
    BlockDesc& b = region_.block(p);
    bool full = kind == PageKind::kSegregated && b.used * classes_.info(cls).size >= classes_.info(cls).end &&
                b.remote.load(std::memory_order_acquire) == 0;
    if (full) {
      link = &b.next;
      continue;
    }
    *link = b.next;
    b.prev = b.next = kNoPage;
    abandoned_count_.fetch_sub(1, std::memory_order_relaxed);
    unlock();
    heap::set_owner(b, owner);
    return {p, false, true};
  }
  sweep_if_hinted_locked(now_ms());
  uint32_t pages = kind == PageKind::kLarge ? region_.header->params.large_block_pages
                                            : classes_.info(cls).block_pages;
  heap::RunAllocation run = alloc_run_locked(PageCount{pages}, kind, kind == PageKind::kLarge ? 0 : cls,
                                             PageCount{1});
  int saved = errno;
  maybe_purge_locked_then_unlock(now_ms());
  if (run.first == kNoPage) {
    errno = saved;
    return {};
  }
  unpoison(region_, run.first, PageCount{pages});
  BlockDesc& b = region_.block(run.first);
  b.remote.store(0, std::memory_order_relaxed);
  b.pending_next.store(0, std::memory_order_relaxed);
  b.prev = b.next = kNoPage;
  heap::set_owner(b, owner);
  return {run.first, run.zeroed, false};
}

void PageHeapOwner::release(PageIndex block) {
  uint32_t now = now_ms();
  poison(region_, block, region_.block(block).pages);
  lock();
  heap::page_heap_free(region_, block, region_.block(block).pages, now);
  sweep_if_hinted_locked(now);
  maybe_purge_locked_then_unlock(now);
}

void PageHeapOwner::sweep_if_hinted_locked(uint32_t now) {
  uint32_t hint = region_.header->abandoned_frees.load(std::memory_order_relaxed);
  if (hint == swept_hint_ || abandoned_count_.load(std::memory_order_relaxed) == 0) return;
  swept_hint_ = hint;
  sweep_abandoned_locked(now);
}

void PageHeapOwner::sweep_abandoned_locked(uint32_t now) {
  // No list can hold more blocks than the region has pages: a walk past
  // that is going round a cycle.
  uint32_t bound = region_.committed_pages();
  for (PageIndex& head : abandoned_) {
    PageIndex* link = &head;
    for (uint32_t steps = 0; *link != kNoPage; ++steps) {
      PageIndex p = *link;
      if (steps >= bound || !listable(p)) {
        cut_list_locked(link);
        break;
      }
      BlockDesc& b = region_.block(p);
      bool empty = false;
      if (b.remote.load(std::memory_order_acquire) != 0) {
        empty = b.kind == PageKind::kLarge
                    ? heap::LargeHeap::collect_abandoned(region_, p)
                    : (heap::block_collect_remote(b, region_.page_address(p)), b.used == 0);
      }
      if (!empty) {
        link = &b.next;
        continue;
      }
      *link = b.next;
      abandoned_count_.fetch_sub(1, std::memory_order_relaxed);
      poison(region_, p, b.pages);
      heap::page_heap_free(region_, p, b.pages, now);
    }
  }
}

void PageHeapOwner::sweep_abandoned() {
  uint32_t now = now_ms();
  lock();
  sweep_abandoned_locked(now);
  maybe_purge_locked_then_unlock(now);
}

void PageHeapOwner::abandon(PageIndex block) {
  BlockDesc& b = region_.block(block);
  lock();
  PageIndex* list = abandoned_list(b.kind, b.cls);
  b.prev = kNoPage;
  b.next = *list;
  *list = block;
  abandoned_count_.fetch_add(1, std::memory_order_relaxed);
  unlock();
}

AcquiredBlock PageHeapOwner::acquire_huge(PageCount pages, PageCount align) {
  lock();
  heap::RunAllocation run = alloc_run_locked(pages, PageKind::kHuge, 0, align);
  int saved = errno;
  maybe_purge_locked_then_unlock(now_ms());
  if (run.first != kNoPage) {
    unpoison(region_, run.first, pages);
    region_.block(run.first).owner_word.store(0, std::memory_order_release);  // live: unclaimed
  }
  errno = saved;
  return {run.first, run.zeroed, false};
}

void PageHeapOwner::release_huge(PageIndex first) { release(first); }

bool PageHeapOwner::zero_huge(PageIndex first, PageCount pages) {
  if (source_->commits_on_use()) return false;
  // No lock: the run is the caller's, and its pages are not the page heap's.
  return source_->discard(heap::data_offset_of(region_, first), pages.bytes());
}

bool PageHeapOwner::move_huge(PageIndex from, PageIndex to, PageCount pages) {
  // No lock: both runs are the caller's. The source says whether its pages
  // can move at all (anonymous memory only, see MemorySource::move).
  if (!source_->move(heap::data_offset_of(region_, from), heap::data_offset_of(region_, to), pages.bytes())) {
    return false;
  }
  pages_moved_.fetch_add(pages.value, std::memory_order_relaxed);
  return true;
}

bool PageHeapOwner::resize_huge(PageIndex first, PageCount want, bool* zeroed) {
  uint32_t now = now_ms();
  lock();
  PageCount have = region_.block(first).pages;
  bool ok = true;
  if (want < have) {
    poison(region_, first + want, PageCount{have.value - want.value});
    heap::page_heap_shrink(region_, first, have, want, now);
  } else {
    ok = heap::page_heap_extend(region_, *source_, first, have, want, zeroed);
    if (ok) unpoison(region_, first + have, PageCount{want.value - have.value});
  }
  maybe_purge_locked_then_unlock(now);
  return ok;
}

// --- discard policy ---

uint32_t PageHeapOwner::purge_limit_pages(uint32_t now) {
  const heap::HeapParams& p = region_.header->params;
  heap::PageHeapState& s = region_.header->page_heap;
  // Forget refaults, and the peak of pages in use, gradually.
  uint32_t halvings = (now - refault_decayed_ms_) / std::max(p.refault_halving_ms, 1u);
  if (halvings > 0) {
    s.refault_pages = halvings >= 32 ? 0 : s.refault_pages >> halvings;
    recent_peak_pages_ = halvings >= 32 ? 0 : recent_peak_pages_ >> halvings;
    refault_decayed_ms_ = now;
  }
  recent_peak_pages_ = std::max(recent_peak_pages_, s.in_use_pages);
  uint64_t share = uint64_t{s.in_use_pages} * p.dirty_ratio_percent / 100;
  // What refaults teach is capped by the fixed maximum or, for a heap whose
  // live data is bigger, by the pages it had in use lately: a program that
  // replaces big buffers keeps about one generation of them for reuse, and
  // one that works in phases (fill, free everything, fill with another
  // size) keeps what a phase uses; never more than it held live lately.
  // (The pages in use now would not do: between two phases they are few.)
  uint64_t learned =
      std::min<uint64_t>(s.refault_pages, std::max<uint64_t>(p.dirty_max_pages, recent_peak_pages_));
  return static_cast<uint32_t>(std::max<uint64_t>({p.dirty_floor_pages, share, learned}));
}

void PageHeapOwner::discard_runs(const heap::PurgeBatch& batch) {
  for (uint32_t i = 0; i < batch.count; ++i) {
    source_->discard(heap::data_offset_of(region_, batch.first[i]), batch.pages[i].bytes());
  }
}

void PageHeapOwner::finish_purge_locked(heap::PurgeBatch* batch) {
  heap::page_heap_finish_purge(region_, batch);
  // The descriptors of a free run's inner pages are never read: give back
  // the table pages they fill, so metadata follows live data too. Under the
  // lock, since the merged runs are allocatable again.
  for (uint32_t i = 0; i < batch->count; ++i) {
    uint32_t first = batch->first[i].value, n = batch->pages[i].value;
    if (n < 3) continue;
    auto discard_inner = [&](uint64_t table, size_t entry) {
      size_t lo = (table + (first + 1) * entry + heap::kPageSize - 1) & ~(heap::kPageSize - 1);
      size_t hi = (table + (first + n - 1) * entry) & ~(heap::kPageSize - 1);
      if (lo < hi) source_->discard(lo, hi - lo);
    };
    discard_inner(region_.offset_in_mapping(region_.page_descs), sizeof(heap::PackedPageDesc));
    discard_inner(region_.offset_in_mapping(region_.blocks), sizeof(heap::BlockDesc));
  }
}

bool PageHeapOwner::under_memory_pressure(uint32_t now) {
  // sysinfo is a syscall: ask at most every 100 ms.
  if (now - last_pressure_check_ms_ >= 100) {
    last_pressure_check_ms_ = now;
    struct sysinfo si;
    pressure_ = sysinfo(&si) == 0 &&
                (uint64_t{si.freeram} + si.bufferram) * si.mem_unit < uint64_t{si.totalram} * si.mem_unit / 10;
  }
  return pressure_;
}

void PageHeapOwner::maybe_purge_locked_then_unlock(uint32_t now) {
  const heap::HeapParams& p = region_.header->params;
  uint32_t limit = 0, decay = 0;
  switch (p.discard_mode) {
    case heap::DiscardMode::kNever:
      unlock();
      return;
    case heap::DiscardMode::kImmediate:
      break;
    case heap::DiscardMode::kPressure:
      if (!under_memory_pressure(now)) {
        unlock();
        return;
      }
      break;
    case heap::DiscardMode::kHysteresis:
      limit = purge_limit_pages(now);
      decay = p.dirty_decay_ms;
      break;
  }
  purge_batch_locked_then_unlock(now, limit, decay);
}

uint64_t PageHeapOwner::purge_batch_locked_then_unlock(uint32_t now, uint32_t limit, uint32_t decay) {
  heap::PurgeBatch batch;
  heap::page_heap_select_purge(region_, now, limit, decay, &batch);
  unlock();
  if (batch.count == 0) return 0;
  uint64_t pages = 0;
  for (uint32_t i = 0; i < batch.count; ++i) pages += batch.pages[i].value;
  discard_runs(batch);
  lock();
  finish_purge_locked(&batch);
  unlock();
  return pages;
}

void PageHeapOwner::purge_all(bool trim_tail) {
  // A discarded page leaves the dirty list, so one pass discards at most
  // every committed page, plus what others free meanwhile. The budget ends
  // the pass on a dirty list clients made circular (its runs come back
  // dirty), which would otherwise keep the owner discarding forever.
  lock();
  uint64_t budget = uint64_t{region_.committed_pages()} * 2;
  for (;;) {
    uint64_t pages = purge_batch_locked_then_unlock(now_ms(), 0, 0);
    if (pages == 0 || pages >= budget) break;
    budget -= pages;
    lock();
  }
  // Then the free tail, whole: a shared object shrinks over it.
  if (!trim_tail) return;
  lock();
  pages_trimmed_.fetch_add(heap::page_heap_trim(region_, *source_).value, std::memory_order_relaxed);
  unlock();
}

heap::RegionStats PageHeapOwner::stat() {
  lock();
  heap::RegionStats s = heap::region_stat(region_, classes_);
  unlock();
  s.pages_moved = pages_moved_.load(std::memory_order_relaxed);
  return s;
}

bool PageHeapOwner::check(char* message, size_t message_size, bool skip_owned_blocks, uint32_t* skipped) {
  lock();
  bool ok = heap::region_check(region_, classes_, message, message_size, skip_owned_blocks, skipped);
  unlock();
  return ok;
}

void PageHeapOwner::reinit_lock_in_child() { pthread_mutex_init(&lock_, nullptr); }

void PageHeapOwner::free_everything() {
  uint32_t now = now_ms();
  lock();
  std::fill(std::begin(abandoned_), std::end(abandoned_), kNoPage);
  abandoned_count_.store(0, std::memory_order_relaxed);
  uint32_t committed = region_.committed_pages(std::memory_order_relaxed);
  for (uint32_t i = 0; i < committed;) {
    PageIndex p{i};
    PageKind kind = region_.page(p).kind;
    PageCount n{std::clamp<uint32_t>(region_.block(p).pages.value, 1, committed - i)};
    if (kind == PageKind::kSegregated || kind == PageKind::kLarge || kind == PageKind::kHuge) {
      heap::set_owner(region_.block(p), heap::kNoOwner);
      poison(region_, p, n);
      heap::page_heap_free(region_, p, n, now);
    }
    i += n.value;
  }
  maybe_purge_locked_then_unlock(now);
}

}  // namespace memd::region
