#include "region/prefaulting_blocks.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>

namespace memd::region {

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older C libraries lack the name
#endif

heap::BlockSource* PrefaultingBlocks::wrap(bool on, heap::BlockSource* inner, const heap::Region& region,
                                           const heap::SizeClasses* classes) {
  if (!on) return inner;
  inner_ = inner;
  region_ = region;
  classes_ = classes;
  large_block_pages_ = region.header->params.large_block_pages;  // as the large heap read it, at attach
  return this;
}

// Below this, a range is left to fault: one madvise costs about what the
// faults of a few pages do, and small blocks made the build of 64-byte
// objects 1.18x slower populated one page at a time
// (bench/results/prefault-2026-11-27.md, before this bound).
constexpr uint32_t kMinPages = 8;

void PrefaultingBlocks::populate(heap::PageIndex first, heap::PageCount pages) {
  if (pages.value < kMinPages || !available_.load(std::memory_order_relaxed)) return;
  // Never past this process's mapping, whatever a length says.
  if (first.value >= region_.data_pages) return;
  pages.value = std::min(pages.value, region_.data_pages - first.value);
  int saved = errno;  // a failure here is not the caller's
  if (madvise(region_.page_address(first), pages.bytes(), MADV_POPULATE_WRITE) == 0) {
    populated_.fetch_add(pages.value, std::memory_order_relaxed);
  } else if (errno == EINVAL) {
    available_.store(false, std::memory_order_relaxed);
  }
  // ENOMEM and the like: the pages fault in as the program touches them,
  // which reports the shortage the usual way.
  errno = saved;
}

heap::AcquiredBlock PrefaultingBlocks::acquire(heap::PageKind kind, uint16_t cls, heap::OwnerId owner) {
  heap::AcquiredBlock got = inner_->acquire(kind, cls, owner);
  // The block's length from the classes this process carves by, not from
  // its descriptor: in a shared region any client can write that one, and
  // a forged length would populate pages that are not this block's.
  if (got.first != heap::kNoPage && got.zeroed) {
    uint32_t pages = kind == heap::PageKind::kLarge ? large_block_pages_
                                                    : classes_->info(cls).block_pages;
    populate(got.first, heap::PageCount{pages});
  }
  return got;
}

heap::AcquiredBlock PrefaultingBlocks::acquire_huge(heap::PageCount pages, heap::PageCount align) {
  heap::AcquiredBlock got = inner_->acquire_huge(pages, align);
  if (got.first != heap::kNoPage && got.zeroed) populate(got.first, pages);
  return got;
}

// `had` is read from the run's descriptor, which a client of a shared
// region could forge; whatever it says, the range populated lies inside
// [first, first + want), the run as resized, which is this caller's.
bool PrefaultingBlocks::resize_huge(heap::PageIndex first, heap::PageCount want, bool* zeroed) {
  heap::PageCount had = region_.block(first).pages;
  if (!inner_->resize_huge(first, want, zeroed)) return false;
  if (want.value > had.value && *zeroed) {
    populate(heap::PageIndex{first.value + had.value}, heap::PageCount{want.value - had.value});
  }
  return true;
}

}  // namespace memd::region
