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

#include "region/lease_channel.h"
#include "heap/block_source.h"
#include "heap/layout.h"
#include "heap/size_class.h"

namespace memd::region {

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
  // How long a spare block may sit unused in the stash before it goes back.
  static constexpr uint64_t kTrimIntervalNs = 1'000'000'000;
  static constexpr uint32_t kLists = heap::kMaxSegregatedClasses + 1;  // last: large blocks
  // Spare blocks are kept while thread heaps use them: a class whose count
  // of blocks in use swings keeps as many spares as the swing, so a ring of
  // objects churning through many classes costs no round trip per block.
  // What no thread heap took for a whole trim interval goes back (the low
  // water mark of each stash since the last trim) at the first block change
  // of any class after the interval, so spares of a class that went quiet
  // are not held for long while the process allocates at all. (A trim from
  // a timer thread would call the daemon under the connection's link lock,
  // which a reconnect needs: it stalled reconnects.)
  //
  // Hard caps bound what a busy process holds meanwhile: per class a number
  // of pages (mid-size blocks have up to 16 pages, large blocks 20), and for all
  // classes together a share of the pages in use. At a cap the oldest half
  // of the class's spares go back in one call, and the class leases in
  // smaller batches again.
  static constexpr uint32_t kStashCapacity = 64;
  static constexpr uint32_t kClassSparePages = 1024;  // 4 MiB of 4 KiB pages
  static constexpr uint32_t kMinSpareEntries = 4;
  static constexpr uint32_t kTotalSparePagesFloor = 1024;
  static constexpr uint32_t kTotalSpareShift = 1;  // spares up to half the pages in use
  // A lease of up to kMaxLeaseBatch blocks of up to 4 pages; bigger blocks
  // in proportionally smaller batches.
  static constexpr uint32_t kCountedBlockPages = 4;
  static constexpr uint32_t kLeasePages = kMaxLeaseBatch * kCountedBlockPages;
  // Blocks one trim or one flush gives back, at most (a stack buffer on the
  // allocation slow path); a trim that finds more leaves them to the next.
  static constexpr uint32_t kGiveBackMax = 128;
  static_assert(kStashCapacity >= kMaxLeaseBatch, "a lease's spares fit an empty stash");
  static_assert(kGiveBackMax >= kStashCapacity && kGiveBackMax <= kMaxReleaseBatch);
  struct Stash {
    heap::PageIndex blocks[kStashCapacity];  // oldest first
    bool zeroed[kStashCapacity];
    uint32_t count = 0;
    uint32_t low_water = 0;     // fewest spares since the last trim
    uint32_t batch = 2;         // next lease size: doubles while the class keeps asking
    uint32_t max_batch = kMaxLeaseBatch;
    uint32_t flush_at = kStashCapacity;  // spares that make a release give the oldest half back
    uint32_t block_pages = 1;
  };
  uint32_t list_of(heap::PageKind kind, uint16_t cls) const {
    // A class read from the region is bounded before it indexes the stash.
    return kind == heap::PageKind::kLarge ? kLists - 1 : std::min<uint32_t>(cls, kLists - 1);
  }
  // Moves the `n` oldest spares of `s` to out[*out_n...] (the caller gives
  // them back after unlocking).
  void take_oldest_locked(Stash& s, uint32_t n, heap::PageIndex* out, uint32_t* out_n);
  // The idle spares of every class, if the interval has passed since the
  // last trim, or now if `force`; either way the next interval starts now,
  // so a burst of forced trims neither delays the next one nor makes every
  // block change trim.
  void trim_locked(uint64_t now, bool force, heap::PageIndex* out, uint32_t* out_n);
  void give_back_unlocked(const heap::PageIndex* blocks, uint32_t n);

  heap::Region region_{};
  LeaseChannel* channel_ = nullptr;
  ClientLease lease_{};
  pthread_mutex_t lock_ = PTHREAD_MUTEX_INITIALIZER;
  Stash stash_[kLists];
  uint64_t spare_pages_ = 0;   // in all stashes
  uint64_t in_use_pages_ = 0;  // in blocks handed to thread heaps and not given back
  uint64_t last_trim_ns_ = 0;
  // Blocks with live objects that thread heaps gave up, told to the owner a
  // batch at a time (a thread's exit abandons many at once). Until then the
  // stash owns them, so they are reclaimed with the rest if we die.
  heap::PageIndex abandoned_[kMaxLeaseBatch];
  uint32_t abandoned_count_ = 0;

  void flush_abandoned_locked();
};

}  // namespace memd::region
