// The block source of a client process: blocks leased from the region's
// owner in batches, kept in a per-class stash until a thread heap needs one,
// and given back in batches. In steady state a thread heap's slow path finds
// a block in the stash without a round trip to the owner.
//
// Stash blocks are owned by the client's stash owner id (see lease_service.h),
// so a client killed with blocks in its stash loses nothing: the owner takes
// them back with the rest.
#pragma once

#include <pthread.h>

#include <algorithm>
#include <cstdint>

#include "client/lease_channel.h"
#include "heap/block_source.h"
#include "heap/layout.h"
#include "heap/size_class.h"

namespace memd::client {

class LeasedBlocks final : public heap::BlockSource {
 public:
  void init(const heap::Region& r, LeaseChannel* channel, const ClientLease& lease);

  heap::AcquiredBlock acquire(heap::PageKind kind, uint16_t cls, heap::OwnerId owner) override;
  void release(heap::PageIndex block) override;
  void abandon(heap::PageIndex block) override;
  heap::AcquiredBlock acquire_huge(heap::PageCount pages, heap::PageCount align) override;
  void release_huge(heap::PageIndex first) override;
  bool resize_huge(heap::PageIndex first, heap::PageCount want, bool* zeroed) override;

  // Gives every stashed block back, and tells the owner of every abandoned
  // one (the process is detaching, or compacting).
  void return_all();
  uint32_t huge_runs_kept() const override { return 1; }

 private:
  static constexpr uint32_t kLists = heap::kMaxSegregatedClasses + 1;  // last: large blocks
  // Spare blocks kept per list: up to kStashMax + kReleaseBatch - 1; at that
  // many the oldest kReleaseBatch go back to the owner in one call (one call
  // per block would cost a round trip for every block a thread heap empties).
  static constexpr uint32_t kStashMax = 8;
  static constexpr uint32_t kReleaseBatch = 16;
  // Those counts are for blocks of up to 4 pages. Bigger blocks (mid-size
  // classes have up to 64 pages, large blocks 20) are kept and leased by
  // pages instead, so that no class holds more spare pages than a 4-page
  // class may: 24 spares of 64 pages would be 6 MiB a class.
  static constexpr uint32_t kCountedBlockPages = 4;
  static constexpr uint32_t kSparePages = (kStashMax + kReleaseBatch) * kCountedBlockPages;
  static constexpr uint32_t kLeasePages = kMaxLeaseBatch * kCountedBlockPages;
  // A lease leaves at most kMaxLeaseBatch - 1 spares, and a release flushes
  // as soon as the count reaches kStashMax + kReleaseBatch.
  static constexpr uint32_t kStashCapacity = std::max(kMaxLeaseBatch, kStashMax + kReleaseBatch) + 1;
  struct Stash {
    heap::PageIndex blocks[kStashCapacity];
    bool zeroed[kStashCapacity];
    uint32_t count = 0;
    uint32_t batch = 2;         // next lease size: doubles while the class keeps asking
    uint32_t max_batch = kMaxLeaseBatch;
    uint32_t flush_at = kStashMax + kReleaseBatch;  // spares that make a release give some back
    uint32_t release_batch = kReleaseBatch;         // and how many
  };
  uint32_t list_of(heap::PageKind kind, uint16_t cls) const {
    return kind == heap::PageKind::kLarge ? kLists - 1 : cls;
  }

  heap::Region region_{};
  LeaseChannel* channel_ = nullptr;
  ClientLease lease_{};
  pthread_mutex_t lock_ = PTHREAD_MUTEX_INITIALIZER;
  Stash stash_[kLists];
  // Blocks with live objects that thread heaps gave up, told to the owner a
  // batch at a time (a thread's exit abandons many at once). Until then the
  // stash owns them, so they are reclaimed with the rest if we die.
  heap::PageIndex abandoned_[kMaxLeaseBatch];
  uint32_t abandoned_count_ = 0;

  void flush_abandoned_locked();
};

}  // namespace memd::client
