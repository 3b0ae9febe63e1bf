// An arena: one region of process-private memory with its page heap, and the
// block source its thread heaps draw on. The page heap, the abandoned-block
// lists and the owner slots are guarded by one lock, taken only on slow paths
// (a new block, an empty block returned, a huge object). Discarding pages
// happens outside the lock.
//
// Data-plane code: no exceptions and no malloc, so the malloc shim can run on
// it; failures are nullptr/false with errno.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "disciplines/anonymous.h"
#include "heap/block_source.h"
#include "heap/inspect.h"
#include "heap/layout.h"
#include "heap/owner_heap.h"
#include "heap/page_heap.h"
#include "heap/params.h"
#include "heap/size_class.h"

namespace memd::client {

struct ArenaOptions {
  size_t reserve_bytes = size_t{64} << 30;  // address space; memory is committed as used
  uint32_t max_threads = 1024;              // thread heaps alive at once
  heap::HeapParams params;
};

class Arena final : public heap::BlockSource {
 public:
  // Maps and formats a new arena. nullptr with errno on failure.
  static Arena* create(const ArenaOptions& options);
  // Unmaps it. REQUIRES: no thread uses it any more.
  static void destroy(Arena* arena);

  // A thread heap for the calling thread; nullptr (errno EAGAIN) if all
  // owner slots are taken.
  heap::OwnerHeap* attach_thread();
  // The thread is leaving: its blocks are released or abandoned.
  void detach_thread(heap::OwnerHeap* heap);
  // Frees for threads that have no heap (or are tearing theirs down): every
  // free it makes goes through the remote path. Thread-safe.
  heap::OwnerHeap* stranger() const { return stranger_; }

  const heap::Region& region() const { return region_; }
  const heap::SizeClasses& classes() const { return classes_; }
  bool contains(const void* p) const { return region_.contains(p); }

  // BlockSource.
  heap::AcquiredBlock acquire(heap::PageKind kind, uint16_t cls, heap::OwnerId owner) override;
  void release(heap::PageIndex block) override;
  void abandon(heap::PageIndex block) override;
  heap::AcquiredBlock acquire_huge(heap::PageCount pages, heap::PageCount align) override;
  void release_huge(heap::PageIndex first) override;
  bool resize_huge(heap::PageIndex first, heap::PageCount want, bool* zeroed) override;

  // Discards every dirty free page now (Vmalloc's compact, page part).
  void purge_all();
  // Collects remote frees into abandoned blocks; releases the empty ones.
  void sweep_abandoned();
  // Walks every block. Exact when no other thread allocates meanwhile.
  heap::RegionStats stat();
  // Verifies every invariant of the region; false and a message if broken.
  bool check(char* message, size_t message_size);
  // Frees every object at once. REQUIRES: no other thread uses the arena,
  // and every thread heap attached to it is reset by its thread or here.
  void clear();

  // fork(): hold the lock across it so the child never sees it taken.
  void lock() { pthread_mutex_lock(&lock_); }
  void unlock() { pthread_mutex_unlock(&lock_); }
  void reinit_lock_in_child();

 private:
  Arena() = default;
  bool init(const ArenaOptions& options);
  void maybe_purge_locked_then_unlock(uint32_t now_ms);
  // Discards one batch of dirty runs beyond `limit` pages or older than
  // `decay` ms, outside the lock. REQUIRES: the lock; releases it. Returns
  // whether anything was discarded.
  bool purge_batch_locked_then_unlock(uint32_t now_ms, uint32_t limit, uint32_t decay);
  void sweep_abandoned_locked(uint32_t now_ms);
  void sweep_if_hinted_locked(uint32_t now_ms);
  uint32_t purge_limit_pages(uint32_t now_ms);
  void discard_runs(const heap::PurgeBatch& batch);
  void finish_purge_locked(heap::PurgeBatch* batch);
  bool under_memory_pressure(uint32_t now_ms);
  heap::OwnerHeap* owner_heap(uint32_t slot) const { return owner_heaps_ + slot; }
  heap::PageIndex* abandoned_list(heap::PageKind kind, uint16_t cls);

  pthread_mutex_t lock_ = PTHREAD_MUTEX_INITIALIZER;
  disciplines::AnonymousSource source_;
  heap::Region region_;
  heap::SizeClasses classes_{heap::HeapParams{}};
  heap::OwnerHeap* owner_heaps_ = nullptr;  // one per owner slot, mapped lazily
  heap::OwnerHeap* stranger_ = nullptr;
  size_t owner_heaps_bytes_ = 0;
  uint32_t max_threads_ = 0;
  heap::PageIndex abandoned_[heap::kMaxSegregatedClasses + 1];  // last: large blocks
  std::atomic<uint32_t> abandoned_count_{0};
  uint32_t swept_hint_ = 0;  // abandoned_frees at the last sweep
  uint32_t last_pressure_check_ms_ = 0;
  uint32_t refault_decayed_ms_ = 0;
  bool pressure_ = false;
};

// Monotonic milliseconds (coarse clock: a vDSO read, no syscall).
uint32_t now_ms();

}  // namespace memd::client
