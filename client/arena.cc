#include "client/arena.h"

#include <sys/mman.h>
#include <sys/random.h>
#include <sys/sysinfo.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <new>

#if defined(MEMD_SANITIZER_ADDRESS)
#include <sanitizer/asan_interface.h>
#endif

namespace memd::client {

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
void poison(const heap::Region& r, PageIndex first, PageCount n) {
  ASAN_POISON_MEMORY_REGION(r.page_address(first), n.bytes());
}
void unpoison(const heap::Region& r, PageIndex first, PageCount n) {
  ASAN_UNPOISON_MEMORY_REGION(r.page_address(first), n.bytes());
}
#else
void poison(const heap::Region&, PageIndex, PageCount) {}
void unpoison(const heap::Region&, PageIndex, PageCount) {}
#endif

// Owner generations stay below the all-ones value, which is the stranger id.
constexpr uint32_t kMaxGeneration = (1u << (31 - heap::kOwnerSlotBits)) - 2;

uint64_t random_secret() {
  uint64_t s = 0;
  if (getrandom(&s, sizeof s, GRND_NONBLOCK) != sizeof s) {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    s = (uint64_t(ts.tv_nsec) << 32) ^ uint64_t(ts.tv_sec) ^ reinterpret_cast<uintptr_t>(&s);
  }
  return s | 1;  // never zero: a zero tag would match fresh memory
}

}  // namespace

Arena* Arena::create(const ArenaOptions& options) {
  if (!heap::params_valid(options.params) || options.max_threads == 0 ||
      options.max_threads > heap::kMaxOwnerSlots) {
    errno = EINVAL;
    return nullptr;
  }
  void* mem = mmap(nullptr, sizeof(Arena), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return nullptr;
  auto* arena = new (mem) Arena();
  if (!arena->init(options)) {
    int saved = errno;
    destroy(arena);
    errno = saved;
    return nullptr;
  }
  return arena;
}

void Arena::destroy(Arena* arena) {
  if (arena->owner_heaps_ != nullptr) munmap(arena->owner_heaps_, arena->owner_heaps_bytes_);
  arena->~Arena();
  munmap(arena, sizeof(Arena));
}

bool Arena::init(const ArenaOptions& options) {
  max_threads_ = options.max_threads;
  if (!source_.reserve(options.reserve_bytes)) return false;
  if (!heap::region_format(source_, options.params, max_threads_, random_secret())) return false;
  region_ = heap::Region::attach(source_.base());
  classes_ = heap::SizeClasses(options.params);
  std::fill(std::begin(abandoned_), std::end(abandoned_), kNoPage);
  // One thread heap per owner slot, +1 for the stranger; pages are touched
  // only when a slot is first used.
  owner_heaps_bytes_ = (sizeof(heap::OwnerHeap) * (max_threads_ + 1) + heap::kPageSize - 1) &
                       ~(heap::kPageSize - 1);
  void* mem = mmap(nullptr, owner_heaps_bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) return false;
  owner_heaps_ = static_cast<heap::OwnerHeap*>(mem);
  // The stranger frees on behalf of threads without a heap (exiting ones):
  // its id owns no block, so every free it makes is a remote one.
  stranger_ = new (owner_heap(max_threads_)) heap::OwnerHeap();
  stranger_->init(region_, &classes_, this, ((kMaxGeneration + 1) << heap::kOwnerSlotBits) |
                                              (heap::kMaxOwnerSlots - 1));
  stranger_->disable_huge_cache();
  return true;
}

heap::OwnerHeap* Arena::attach_thread() {
  // The lowest free slot: a new thread reuses the thread heap (and the
  // memory it has touched) of the last thread to leave, instead of warming
  // up a new one. The hint says no slot below it is free.
  lock();
  heap::RegionHeader* h = region_.header;
  for (uint32_t slot = h->next_owner_hint.load(std::memory_order_relaxed); slot < max_threads_; ++slot) {
    heap::OwnerSlot& s = region_.slots[slot];
    if (s.in_use.load(std::memory_order_relaxed)) continue;
    s.in_use.store(1, std::memory_order_relaxed);
    h->next_owner_hint.store(slot + 1, std::memory_order_relaxed);
    uint32_t gen = static_cast<uint32_t>(s.pending.load(std::memory_order_relaxed) >> 32) + 1;
    if (gen > kMaxGeneration) gen = 1;
    unlock();
    heap::OwnerId id = gen << heap::kOwnerSlotBits | slot;
    heap::pending_open(region_, id);
    auto* oh = new (owner_heap(slot)) heap::OwnerHeap();
    oh->init(region_, &classes_, this, id);
    return oh;
  }
  unlock();
  errno = EAGAIN;
  return nullptr;
}

void Arena::detach_thread(heap::OwnerHeap* oh) {
  oh->abandon_all();
  uint32_t slot = heap::slot_of(oh->id());
  lock();
  region_.slots[slot].in_use.store(0, std::memory_order_relaxed);
  if (slot < region_.header->next_owner_hint.load(std::memory_order_relaxed)) {
    region_.header->next_owner_hint.store(slot, std::memory_order_relaxed);
  }
  unlock();
}

PageIndex* Arena::abandoned_list(PageKind kind, uint16_t cls) {
  return kind == PageKind::kLarge ? &abandoned_[heap::kMaxSegregatedClasses] : &abandoned_[cls];
}

AcquiredBlock Arena::acquire(PageKind kind, uint16_t cls, heap::OwnerId owner) {
  lock();
  PageIndex* list = abandoned_list(kind, cls);
  if (*list != kNoPage) {
    // Adopt before taking fresh pages: reuses the free space of dead threads.
    PageIndex p = *list;
    BlockDesc& b = region_.block(p);
    *list = b.next;
    b.prev = b.next = kNoPage;
    abandoned_count_.fetch_sub(1, std::memory_order_relaxed);
    unlock();
    heap::set_owner(b, owner);
    return {p, false, true};
  }
  sweep_if_hinted_locked(now_ms());
  uint32_t pages = kind == PageKind::kLarge ? region_.header->params.large_block_pages
                                            : classes_.info(cls).block_pages;
  heap::RunAllocation run = heap::page_heap_alloc(region_, source_, PageCount{pages}, kind,
                                                  kind == PageKind::kLarge ? 0 : cls);
  int saved = errno;
  maybe_purge_locked_then_unlock(now_ms());
  if (run.first == kNoPage) {
    errno = saved;
    return {};
  }
  unpoison(region_, run.first, PageCount{pages});
  BlockDesc& b = region_.block(run.first);
  b.remote_head.store(0, std::memory_order_relaxed);
  b.pending_next.store(0, std::memory_order_relaxed);
  b.prev = b.next = kNoPage;
  heap::set_owner(b, owner);
  return {run.first, run.zeroed, false};
}

void Arena::release(PageIndex block) {
  uint32_t now = now_ms();
  poison(region_, block, region_.block(block).pages);
  lock();
  heap::page_heap_free(region_, block, region_.block(block).pages, now);
  sweep_if_hinted_locked(now);
  maybe_purge_locked_then_unlock(now);
}

void Arena::sweep_if_hinted_locked(uint32_t now) {
  uint32_t hint = region_.header->abandoned_frees.load(std::memory_order_relaxed);
  if (hint == swept_hint_ || abandoned_count_.load(std::memory_order_relaxed) == 0) return;
  swept_hint_ = hint;
  sweep_abandoned_locked(now);
}

void Arena::sweep_abandoned_locked(uint32_t now) {
  for (PageIndex& head : abandoned_) {
    PageIndex* link = &head;
    while (*link != kNoPage) {
      PageIndex p = *link;
      BlockDesc& b = region_.block(p);
      bool empty = false;
      if (b.remote_head.load(std::memory_order_acquire) != 0) {
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

void Arena::sweep_abandoned() {
  uint32_t now = now_ms();
  lock();
  sweep_abandoned_locked(now);
  maybe_purge_locked_then_unlock(now);
}

void Arena::abandon(PageIndex block) {
  BlockDesc& b = region_.block(block);
  lock();
  PageIndex* list = abandoned_list(b.kind, b.cls);
  b.prev = kNoPage;
  b.next = *list;
  *list = block;
  abandoned_count_.fetch_add(1, std::memory_order_relaxed);
  unlock();
}

AcquiredBlock Arena::acquire_huge(PageCount pages, PageCount align) {
  lock();
  heap::RunAllocation run = heap::page_heap_alloc(region_, source_, pages, PageKind::kHuge, 0, align);
  int saved = errno;
  maybe_purge_locked_then_unlock(now_ms());
  if (run.first != kNoPage) {
    unpoison(region_, run.first, pages);
    region_.block(run.first).owner_word.store(0, std::memory_order_release);  // live: unclaimed
  }
  errno = saved;
  return {run.first, run.zeroed, false};
}

void Arena::release_huge(PageIndex first) { release(first); }

bool Arena::resize_huge(PageIndex first, PageCount want, bool* zeroed) {
  uint32_t now = now_ms();
  lock();
  PageCount have = region_.block(first).pages;
  bool ok = true;
  if (want < have) {
    poison(region_, first + want, PageCount{have.value - want.value});
    heap::page_heap_shrink(region_, first, have, want, now);
  } else {
    ok = heap::page_heap_extend(region_, first, have, want, zeroed);
    if (ok) unpoison(region_, first + have, PageCount{want.value - have.value});
  }
  maybe_purge_locked_then_unlock(now);
  return ok;
}

// --- discard policy ---

uint32_t Arena::purge_limit_pages(uint32_t now) {
  const heap::HeapParams& p = region_.header->params;
  heap::PageHeapState& s = region_.header->page_heap;
  // Forget refaults gradually.
  uint32_t halvings = (now - refault_decayed_ms_) / std::max(p.refault_halving_ms, 1u);
  if (halvings > 0) {
    s.refault_pages = halvings >= 32 ? 0 : s.refault_pages >> halvings;
    refault_decayed_ms_ = now;
  }
  uint64_t share = uint64_t{s.in_use_pages} * p.dirty_ratio_percent / 100;
  uint64_t learned = std::min(s.refault_pages, p.dirty_max_pages);
  return static_cast<uint32_t>(std::max<uint64_t>({p.dirty_floor_pages, share, learned}));
}

void Arena::discard_runs(const heap::PurgeBatch& batch) {
  for (uint32_t i = 0; i < batch.count; ++i) {
    source_.discard(heap::data_offset_of(region_, batch.first[i]), batch.pages[i].bytes());
  }
}

void Arena::finish_purge_locked(heap::PurgeBatch* batch) {
  heap::page_heap_finish_purge(region_, batch);
  // The descriptors of a free run's inner pages are never read: give back
  // the table pages they fill, so metadata follows live data too. Under the
  // lock, since the merged runs are allocatable again.
  const heap::RegionHeader& h = *region_.header;
  for (uint32_t i = 0; i < batch->count; ++i) {
    uint32_t first = batch->first[i].value, n = batch->pages[i].value;
    if (n < 3) continue;
    auto discard_inner = [&](uint64_t table, size_t entry) {
      size_t lo = (table + (first + 1) * entry + heap::kPageSize - 1) & ~(heap::kPageSize - 1);
      size_t hi = (table + (first + n - 1) * entry) & ~(heap::kPageSize - 1);
      if (lo < hi) source_.discard(lo, hi - lo);
    };
    discard_inner(h.page_desc_offset, sizeof(heap::PackedPageDesc));
    discard_inner(h.block_desc_offset, sizeof(heap::BlockDesc));
  }
}

bool Arena::under_memory_pressure(uint32_t now) {
  // sysinfo is a syscall: ask at most every 100 ms.
  if (now - last_pressure_check_ms_ >= 100) {
    last_pressure_check_ms_ = now;
    struct sysinfo si;
    pressure_ = sysinfo(&si) == 0 &&
                (uint64_t{si.freeram} + si.bufferram) * si.mem_unit < uint64_t{si.totalram} * si.mem_unit / 10;
  }
  return pressure_;
}

void Arena::maybe_purge_locked_then_unlock(uint32_t now) {
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

bool Arena::purge_batch_locked_then_unlock(uint32_t now, uint32_t limit, uint32_t decay) {
  heap::PurgeBatch batch;
  heap::page_heap_select_purge(region_, now, limit, decay, &batch);
  unlock();
  if (batch.count == 0) return false;
  discard_runs(batch);
  lock();
  finish_purge_locked(&batch);
  unlock();
  return true;
}

void Arena::purge_all() {
  do {
    lock();
  } while (purge_batch_locked_then_unlock(now_ms(), 0, 0));
}

void Arena::reinit_lock_in_child() { pthread_mutex_init(&lock_, nullptr); }

}  // namespace memd::client

namespace memd::client {

heap::RegionStats Arena::stat() {
  lock();
  heap::RegionStats s = heap::region_stat(region_, classes_);
  unlock();
  return s;
}

bool Arena::check(char* message, size_t message_size) {
  lock();
  bool ok = heap::region_check(region_, classes_, message, message_size);
  unlock();
  return ok;
}

void Arena::clear() {
  uint32_t now = now_ms();
  lock();
  for (uint32_t slot = 0; slot < max_threads_; ++slot) {
    if (region_.slots[slot].in_use.load(std::memory_order_relaxed)) owner_heap(slot)->reset();
  }
  std::fill(std::begin(abandoned_), std::end(abandoned_), kNoPage);
  abandoned_count_.store(0, std::memory_order_relaxed);
  uint32_t committed = region_.header->page_heap.committed_pages.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < committed;) {
    PageIndex p{i};
    PageKind kind = region_.page(p).kind;
    PageCount n = region_.block(p).pages;
    if (kind == PageKind::kSegregated || kind == PageKind::kLarge || kind == PageKind::kHuge) {
      heap::set_owner(region_.block(p), heap::kNoOwner);
      poison(region_, p, n);
      heap::page_heap_free(region_, p, n, now);
    }
    i += n.value;
  }
  maybe_purge_locked_then_unlock(now);
}

}  // namespace memd::client
