#include "region/thread_heap_pool.h"

#include <sys/mman.h>

#include <cerrno>
#include <new>

#include "heap/remote_free.h"

namespace memd::region {

ThreadHeapPool::~ThreadHeapPool() {
  if (heaps_ != nullptr) munmap(heaps_, heaps_bytes_);
}

bool ThreadHeapPool::init(const heap::Region& r, const heap::SizeClasses* classes,
                         heap::BlockSource* source, uint32_t holder) {
  region_ = r;
  classes_ = classes;
  source_ = source;
  holder_ = holder;
  max_slots_ = r.max_owners;
  // Pages are touched only when a slot is first used by this process.
  size_t heaps = sizeof(heap::ThreadHeap) * (max_slots_ + 1);
  heaps_bytes_ = (heaps + heap::kPageSize - 1) & ~(heap::kPageSize - 1);
  void* mem = mmap(nullptr, heaps_bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) return false;
  heaps_ = static_cast<heap::ThreadHeap*>(mem);
  // The stranger frees on behalf of threads without a heap (exiting ones):
  // its id owns no block, so every free it makes is a remote one.
  // Default-initialized, not value-initialized (no "()"): the members
  // set what they must, and zeroing the whole object first would touch all
  // of its pages, most of which (the large heap's list heads) stay unused
  // until the heap has large objects, and for most strangers forever.
  stranger_ = new (heaps_ + max_slots_) heap::ThreadHeap;
  stranger_->init(region_, classes_, source_,
                  ((kMaxOwnerGeneration + 1) << heap::kOwnerSlotBits) | (heap::kMaxOwnerSlots - 1));
  stranger_->disable_huge_cache();
  return true;
}

heap::ThreadHeap* ThreadHeapPool::attach_thread() {
  // A kept heap first: its blocks are warm and partly used, and the frees
  // of the objects it handed out are local again.
  for (uint32_t i = 0; i < keep_limit_; ++i) {
    if (kept_[i].load(std::memory_order_relaxed) == nullptr) continue;
    if (heap::ThreadHeap* kept = kept_[i].exchange(nullptr, std::memory_order_acquire)) return kept;
  }
  // The lowest free slot: a new thread reuses the thread heap (and the
  // memory it has touched) of the last thread to leave, instead of warming
  // up a new one. The hint says no slot below it was free lately.
  heap::RegionHeader* h = region_.header;
  uint32_t start = h->next_owner_hint.load(std::memory_order_relaxed);
  if (start >= max_slots_) start = 0;
  for (uint32_t n = 0; n < max_slots_; ++n) {
    uint32_t slot = (start + n) % max_slots_;
    heap::OwnerSlot& s = region_.slots[slot];
    uint32_t expected = 0;
    if (s.in_use.load(std::memory_order_relaxed) != 0 ||
        !s.in_use.compare_exchange_strong(expected, holder_, std::memory_order_acq_rel)) {
      continue;
    }
    h->next_owner_hint.store(slot + 1, std::memory_order_relaxed);
    uint32_t gen = static_cast<uint32_t>(s.pending.load(std::memory_order_relaxed) >> 32) + 1;
    if (gen > kMaxOwnerGeneration) gen = 1;
    heap::OwnerId id = gen << heap::kOwnerSlotBits | slot;
    heap::pending_open(region_, id);
    heap::ThreadHeap* oh = heaps_ + slot;
    std::atomic<uint64_t>& built = built_[slot / 64];
    const uint64_t bit = uint64_t{1} << (slot % 64);
    if (!(built.load(std::memory_order_relaxed) & bit)) {
      new (oh) heap::ThreadHeap;  // default-initialized, as the stranger
      built.fetch_or(bit, std::memory_order_release);
      for (uint32_t used = slots_used_.load(std::memory_order_relaxed);
           used <= slot && !slots_used_.compare_exchange_weak(used, slot + 1, std::memory_order_relaxed);) {
      }
    }
    oh->init(region_, classes_, source_, id);
    if (gather_remote_frees_) oh->enable_remote_batching();
    return oh;
  }
  errno = EAGAIN;
  return nullptr;
}

void ThreadHeapPool::sum_counters(heap::CounterSnapshot* out) const {
  if (stranger_ == nullptr) return;
  uint32_t used = slots_used_.load(std::memory_order_relaxed);
  for (uint32_t slot = 0; slot < used; ++slot) {
    if (built_[slot / 64].load(std::memory_order_acquire) & (uint64_t{1} << (slot % 64))) {
      heaps_[slot].add_counters(out);
    }
  }
  stranger_->add_counters(out);
}

void ThreadHeapPool::detach_thread(heap::ThreadHeap* oh) {
  // Kept as it is, slot still held and pending stack open: the release
  // orders this thread's last writes to it before the next thread's use.
  // Its gathered remote frees go now: a kept heap may wait long for a thread.
  oh->flush_remote_frees();
  for (uint32_t i = 0; i < keep_limit_; ++i) {
    heap::ThreadHeap* expected = nullptr;
    if (kept_[i].compare_exchange_strong(expected, oh, std::memory_order_release, std::memory_order_relaxed)) return;
  }
  abandon(oh);
}

void ThreadHeapPool::abandon_all_heaps() {
  for (std::atomic<heap::ThreadHeap*>& k : kept_) k.store(nullptr, std::memory_order_relaxed);
  for_each_attached([this](heap::ThreadHeap& h) { abandon(&h); });
}

void ThreadHeapPool::abandon(heap::ThreadHeap* oh) {
  oh->abandon_all();
  uint32_t slot = heap::slot_of(oh->id());
  region_.slots[slot].in_use.store(0, std::memory_order_release);
  uint32_t hint = region_.header->next_owner_hint.load(std::memory_order_relaxed);
  while (slot < hint && !region_.header->next_owner_hint.compare_exchange_weak(hint, slot)) {
  }
}

}  // namespace memd::region
