// An arena: one region of process-private memory, its page heap and its
// thread heaps. The page heap (page_heap_owner.h) runs under a lock taken
// only on slow paths; thread heaps (thread_heap_pool.h) allocate without one.
//
// Data-plane code: no exceptions and no malloc, so the malloc shim can run on
// it; failures are nullptr/false with errno.
#pragma once

#include <cstddef>
#include <cstdint>

#include "region/thread_heap_pool.h"
#include "region/page_heap_owner.h"
#include "region/prefaulting_blocks.h"
#include "disciplines/anonymous.h"
#include "heap/inspect.h"
#include "heap/layout.h"
#include "heap/params.h"
#include "heap/size_class.h"

namespace memd::region {

struct ArenaOptions {
  size_t reserve_bytes = size_t{64} << 30;  // address space; memory is committed as used
  uint32_t max_threads = 1024;              // thread heaps alive at once
  heap::HeapParams params;
  bool prefault = false;    // populate fresh blocks and runs at once (prefaulting_blocks.h)
  bool huge_pages = false;  // transparent huge pages for the whole reservation
  uint32_t kept_heaps = 0;  // exited threads' heaps kept for new threads (ThreadHeapPool::set_kept_heaps)
};

class Arena final : public ThreadHeapHost {
 public:
  // Maps and formats a new arena. nullptr with errno on failure.
  static Arena* create(const ArenaOptions& options);
  // Unmaps it. REQUIRES: no thread uses it any more.
  static void destroy(Arena* arena);

  heap::ThreadHeap* attach_thread() override { return threads_.attach_thread(); }
  void detach_thread(heap::ThreadHeap* heap) override { threads_.detach_thread(heap); }
  heap::ThreadHeap* stranger() const override { return threads_.stranger(); }

  const heap::Region& region() const { return pages_.region(); }
  const heap::SizeClasses& classes() const { return pages_.classes(); }
  bool contains(const void* p) const { return pages_.region().contains(p); }
  PageHeapOwner& pages() { return pages_; }
  // Pages populated ahead of use (ArenaOptions::prefault).
  uint64_t pages_prefaulted() const { return prefault_.pages_populated(); }

  void purge_all() { pages_.purge_all(); }
  void sweep_abandoned() { pages_.sweep_abandoned(); }
  heap::RegionStats stat() { return pages_.stat(); }
  void sum_counters(heap::CounterSnapshot* out) const { threads_.sum_counters(out); }
  bool check(char* message, size_t message_size) { return pages_.check(message, message_size); }
  // Frees every object at once. REQUIRES: no other thread uses the arena.
  void clear();

  void lock() { pages_.lock(); }
  void unlock() { pages_.unlock(); }
  void reinit_lock_in_child() { pages_.reinit_lock_in_child(); }

 private:
  Arena() = default;
  bool init(const ArenaOptions& options);

  disciplines::AnonymousSource source_;
  PageHeapOwner pages_;
  PrefaultingBlocks prefault_;  // between the thread heaps and pages_ when asked for
  ThreadHeapPool threads_;
};

}  // namespace memd::region
