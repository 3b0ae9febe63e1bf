#include "heap/params.h"

#include "heap/large_heap.h"
#include "heap/size_class.h"

namespace memd::heap {

bool params_valid(const HeapParams& p) {
  return p.small_max % kGranule == 0 && p.medium_max % kGranule == 0 && p.small_max >= kMinObject &&
         p.small_max < p.medium_max && p.medium_max < kMaxSegregatedClasses * kGranule &&
         p.medium_max < p.large_max && p.large_max <= kLargeMaxLimit && p.small_block_pages >= 1 &&
         p.medium_block_pages >= 1 && p.small_block_pages <= kMaxBlockPages &&
         p.medium_block_pages <= kMaxBlockPages && p.large_block_pages <= kMaxBlockPages &&
         p.small_max <= p.small_block_pages * kPageSize &&
         p.medium_max <= p.medium_block_pages * kPageSize &&
         uint64_t{p.large_max} + 2 * sizeof(ChunkHeader) + p.medium_max <= uint64_t{p.large_block_pages} * kPageSize &&
         static_cast<uint32_t>(p.discard_mode) <= static_cast<uint32_t>(DiscardMode::kNever);
}

}  // namespace memd::heap
