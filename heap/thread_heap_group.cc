// ThreadHeap::alloc_grouped: call-chain pools after the DPA paper. The
// objects of one allocation chain (region/chain_pools.h decides which) get
// blocks of their own, one list pair per size class and group, so the list
// or tree they form is laid out in allocation order, apart from everything
// else the program allocates. The blocks are ordinary segregated blocks of
// this heap: free, remote free, adoption and compaction treat them like any
// other; only the owner's lists differ (BlockDesc::chain_group says which).
#include <sys/mman.h>

#include <cstdint>

#include "heap/block.h"
#include "heap/heap_counters.h"
#include "heap/thread_heap.h"

namespace memd::heap {

ThreadHeap::ClassList* ThreadHeap::group_list(uint32_t group, uint32_t cls) {
  if (group == 0 || group > kMaxChainGroups || cls >= kChainGroupClasses) return nullptr;
  if (chain_groups_ == nullptr) {
    // Process memory of its own, not the region's: the lists are this
    // heap's private state, like the rest of the ThreadHeap. Untouched
    // groups cost no resident pages.
    void* m = mmap(nullptr, sizeof(ChainGroupLists), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    chain_groups_ = static_cast<ChainGroupLists*>(m);
  }
  uint32_t bit = uint32_t{1} << (group - 1);
  if (!(chain_groups_ready_ & bit)) {
    // The class facts are the plain list's; the blocks start empty. The
    // counts stay unused: a group's allocations and frees count in the
    // class's own list.
    for (uint32_t c = 0; c < kChainGroupClasses; ++c) {
      ClassList& cl = chain_groups_->lists[group - 1][c];
      const ClassList& plain = lists_[c];
      cl.cur = empty_sentinel();
      cl.cur_base = nullptr;
      cl.size = plain.size;
      cl.end = plain.end;
      cl.reciprocal = plain.reciprocal;
      cl.empty_kept = 0;
      cl.avail = cl.full = BlockList{};
    }
    chain_groups_ready_ |= bit;
  }
  return &chain_groups_->lists[group - 1][cls];
}

void* ThreadHeap::alloc_grouped_slow(size_t size, uint32_t group) {
  if (group == 0 || size > kChainGroupMaxSize) return alloc(size);
  uint32_t cls = SizeClasses::class_of(size);
  if (cls < classes_->first_class() || cls > classes_->last_class()) return alloc(size);
  ClassList* cl = group_list(group, cls);
  if (cl == nullptr) return alloc(size);
  // The countdown's end: a sample goes where samples go (a chunk of a large
  // block); anything else stays in the group.
  if ((sample_countdown_ -= static_cast<int64_t>(size)) < 0 && sample_due(size)) return alloc_sample(size, 0, nullptr);
  if (void* p = pop_current(*cl, lists_[cls].counts.allocs, 0)) return p;
  return refill_list(*cl, cls, static_cast<uint8_t>(group));
}

}  // namespace memd::heap
