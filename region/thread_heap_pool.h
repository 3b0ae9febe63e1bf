// The thread heaps of one process over one region, one per owner slot the
// process holds. Owner slots live in the region and are claimed by CAS, so
// several processes can draw thread heaps from one shared region; the heaps
// themselves live in this process's memory, mapped lazily.
//
// Data-plane code: no exceptions, no malloc.
#pragma once

#include <cstddef>
#include <atomic>
#include <cstdint>

#include "region/thread_heap_host.h"
#include "heap/block_source.h"
#include "heap/heap_counters.h"
#include "heap/layout.h"
#include "heap/thread_heap.h"
#include "heap/size_class.h"

namespace memd::region {

class ThreadHeapPool final : public ThreadHeapHost {
 public:
  ThreadHeapPool() = default;
  ThreadHeapPool(const ThreadHeapPool&) = delete;
  ThreadHeapPool& operator=(const ThreadHeapPool&) = delete;
  ~ThreadHeapPool() override;

  // `holder` tags the slots this process claims (see OwnerSlot::in_use).
  // False with errno on failure.
  bool init(const heap::Region& r, const heap::SizeClasses* classes, heap::BlockSource* source,
            uint32_t holder);

  heap::ThreadHeap* attach_thread() override;
  void detach_thread(heap::ThreadHeap* heap) override;
  heap::ThreadHeap* stranger() const override { return stranger_; }
  // Abandons every thread heap this process holds here, kept ones too.
  // REQUIRES: no thread uses any of them any more.
  void abandon_all_heaps();

  // Calls f(heap) for every thread heap this process has attached.
  template <class F>
  void for_each_attached(F f) {
    for (uint32_t slot = 0; slot < max_slots_; ++slot) {
      if (region_.slots[slot].in_use.load(std::memory_order_acquire) == holder_ && heaps_[slot].id() != 0) {
        f(heaps_[slot]);
      }
    }
  }

  uint32_t holder() const { return holder_; }

  // How many heaps of exited threads are kept whole (owner slot, blocks and
  // all) for the next threads to attach, as glibc hands a new thread the
  // arena of one that left: a server's short-lived threads then free the
  // objects their predecessors allocated as local frees, into blocks they
  // own, instead of as remote frees into abandoned blocks. 0 (the default):
  // every exiting thread's heap is abandoned. At most kMaxKeptHeaps. Set
  // before any thread attaches. A kept heap holds what an idle thread
  // would; remote frees into its blocks wait on its pending stack for the
  // next thread to take it.
  static constexpr uint32_t kMaxKeptHeaps = 16;
  void set_kept_heaps(uint32_t n) { keep_limit_ = n < kMaxKeptHeaps ? n : kMaxKeptHeaps; }
  // Thread heaps gather remote frees per class before pushing them
  // (ThreadHeap::enable_remote_batching): for a process-private arena only,
  // whose heaps die with the process. Never the stranger, which threads share.
  void set_gather_remote_frees(bool on) { gather_remote_frees_ = on; }

  // Adds up the telemetry counters of every thread heap this process has
  // had here (cumulative: a slot's heap and its counts outlive its threads).
  void sum_counters(heap::CounterSnapshot* out) const;

 private:
  heap::Region region_{};
  const heap::SizeClasses* classes_ = nullptr;
  heap::BlockSource* source_ = nullptr;
  heap::ThreadHeap* heaps_ = nullptr;  // one per owner slot, +1 for the stranger
  heap::ThreadHeap* stranger_ = nullptr;
  // A bit per owner slot whose heap is constructed (once: a thread that
  // takes the slot later initializes the same heap again, so its counts
  // stay cumulative). Set with release after the construction, so a
  // reporter thread that sees it may read the heap's counts.
  std::atomic<uint64_t> built_[heap::kMaxOwnerSlots / 64] = {};
  std::atomic<uint32_t> slots_used_{0};  // slots below this have been built
  size_t heaps_bytes_ = 0;
  uint32_t max_slots_ = 0;
  uint32_t holder_ = 0;
  // Heaps of exited threads waiting for a new thread; null: a free place.
  std::atomic<heap::ThreadHeap*> kept_[kMaxKeptHeaps] = {};
  uint32_t keep_limit_ = 0;
  bool gather_remote_frees_ = false;

  // Gives the heap's blocks up and frees its owner slot.
  void abandon(heap::ThreadHeap* heap);
};

// Owner generations stay below the all-ones value, which is the stranger's.
inline constexpr uint32_t kMaxOwnerGeneration = (1u << (31 - heap::kOwnerSlotBits)) - 2;

}  // namespace memd::region
