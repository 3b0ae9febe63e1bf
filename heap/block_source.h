// Where a thread heap gets its blocks and where it gives them back. Within a
// process it is the arena (region/arena.h), which runs the page heap under a
// lock; with the daemon it is the lease client, which asks over gRPC. The
// source writes page descriptors before it returns a block: a block is usable
// as soon as acquire returns.
#pragma once

#include "heap/layout.h"

namespace memd::heap {

struct AcquiredBlock {
  PageIndex first = kNoPage;
  bool zeroed = false;   // fresh pages: they read as zero
  bool adopted = false;  // a block abandoned by a thread that exited
};

class BlockSource {
 public:
  virtual ~BlockSource() = default;
  // A block for segregated class `cls` (kSegregated) or a large block
  // (kLarge, cls 0), owned by `owner` on return. kNoPage and errno on failure.
  virtual AcquiredBlock acquire(PageKind kind, uint16_t cls, OwnerId owner) = 0;
  // An empty block, disowned, goes back to the page heap.
  virtual void release(PageIndex block) = 0;
  // A block that still holds live objects, disowned: another owner adopts it.
  virtual void abandon(PageIndex block) = 0;
  // A run of pages for one huge object, and its return.
  virtual AcquiredBlock acquire_huge(PageCount pages, PageCount align) = 0;
  virtual void release_huge(PageIndex first) = 0;
  // Grows or shrinks a huge object's run in place; false if it cannot.
  virtual bool resize_huge(PageIndex first, PageCount want, bool* zeroed) = 0;
  // Makes the pages of a huge object the caller holds read as zero by giving
  // them back to the system: they are faulted in again, zeroed by the kernel,
  // only where the program touches them. A calloc of a reused (dirty) run
  // then neither writes nor keeps resident the pages it never uses. False if
  // this source cannot (the caller writes zeros instead).
  virtual bool zero_huge(PageIndex first, PageCount pages) { return false; }
  // Moves the first `pages` pages of huge run `from` to huge run `to` (both
  // the caller's) without copying; `from` reads as zero after. False, with
  // nothing changed, if this source cannot (the caller copies instead).
  virtual bool move_huge(PageIndex from, PageIndex to, PageCount pages) { return false; }
  // How many freed huge runs one thread heap may keep for its own reuse.
  // A region whose free pages several processes draw on says 1: runs each
  // process keeps aside split the free space the others need for big runs
  // (clients of a 256 MiB region a third full failed 2 MiB requests).
  virtual uint32_t huge_runs_kept() const { return 8; }
  // Whether a thread heap may keep empty blocks aside and give one another
  // class of the same block length in place, rewriting its page descriptors
  // itself (the lookaside, ThreadHeap::park_block). Only where the
  // descriptors are this process's alone: no other process leases from the
  // same pages and no recovery reads them.
  virtual bool parks_empty_blocks() const { return false; }
};

}  // namespace memd::heap
