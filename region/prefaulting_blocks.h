// A BlockSource that fills fresh pages before the thread heap uses them
// (the user-mode page allocator paper's prefault). A block or run that
// comes with pages never touched (zeroed) is populated with one
// madvise(MADV_POPULATE_WRITE) instead of one page fault per page as the
// program first writes it: the kernel maps the whole range in one pass.
// Ranges of fewer than 8 pages (small and medium blocks) are left to fault:
// there the call costs more than it saves.
// It costs memory only where the heap would have touched the pages anyway
// (a block is bump-allocated front to back; a huge run is the program's),
// except for a huge run the program never writes in full.
//
// Data-plane code: no exceptions, no malloc.
#pragma once

#include <atomic>
#include <cstdint>

#include "heap/block_source.h"
#include "heap/layout.h"
#include "heap/size_class.h"

namespace memd::region {

class PrefaultingBlocks final : public heap::BlockSource {
 public:
  // The source the thread heaps should use: this one, serving from
  // `inner` (whose blocks are pages of `region`, carved by `classes`), when
  // `on`; else `inner` itself.
  heap::BlockSource* wrap(bool on, heap::BlockSource* inner, const heap::Region& region,
                          const heap::SizeClasses* classes);

  heap::AcquiredBlock acquire(heap::PageKind kind, uint16_t cls, heap::OwnerId owner) override;
  void release(heap::PageIndex block) override { inner_->release(block); }
  void abandon(heap::PageIndex block) override { inner_->abandon(block); }
  heap::AcquiredBlock acquire_huge(heap::PageCount pages, heap::PageCount align) override;
  void release_huge(heap::PageIndex first) override { inner_->release_huge(first); }
  bool resize_huge(heap::PageIndex first, heap::PageCount want, bool* zeroed) override;
  bool zero_huge(heap::PageIndex first, heap::PageCount pages) override { return inner_->zero_huge(first, pages); }
  bool move_huge(heap::PageIndex from, heap::PageIndex to, heap::PageCount pages) override {
    return inner_->move_huge(from, to, pages);
  }
  uint32_t huge_runs_kept() const override { return inner_->huge_runs_kept(); }
  bool parks_empty_blocks() const override { return inner_->parks_empty_blocks(); }

  // Pages populated so far; whether the kernel can (MADV_POPULATE_WRITE is
  // Linux 5.14: an older kernel turns prefaulting off at the first call).
  uint64_t pages_populated() const { return populated_.load(std::memory_order_relaxed); }
  bool available() const { return available_.load(std::memory_order_relaxed); }

 private:
  void populate(heap::PageIndex first, heap::PageCount pages);

  heap::BlockSource* inner_ = nullptr;
  heap::Region region_{};
  const heap::SizeClasses* classes_ = nullptr;
  uint32_t large_block_pages_ = 0;
  std::atomic<uint64_t> populated_{0};
  std::atomic<bool> available_{true};
};

}  // namespace memd::region
