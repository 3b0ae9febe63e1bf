#include "heap/params.h"

#include <algorithm>

#include "heap/large_heap.h"
#include "heap/method_chunks.h"
#include "heap/size_class.h"

namespace memd::heap {

static_assert(kMinMethodChunk > kMaxMediumMax && kMinMethodChunk > kLargeMaxLimit,
              "a method's chunk is a huge run under every valid parameter set");

bool params_valid(const HeapParams& p) {
  return p.small_max % kGranule == 0 && p.medium_max % kGranule == 0 && p.small_max >= kMinObject &&
         p.small_max < p.medium_max && p.medium_max <= kMaxMediumMax &&
         // a mid-size block of at most kMaxMidBlockPages must hold kMinObjectsPerMidBlock
         p.medium_max <= kMaxMidBlockPages * kPageSize / kMinObjectsPerMidBlock &&
         // the table ends at a class (an odd multiple of 8 up to 504: a
         // region made when requests took those classes, size_class.h)
         SizeClasses::is_class_size(p.medium_max) &&
         // large objects above medium_max, or none
         (p.medium_max == p.large_max || (has_large_sizes(p) && p.large_max <= kLargeMaxLimit)) &&
         p.small_block_pages >= 1 &&
         p.medium_block_pages >= 1 && p.small_block_pages <= kMaxBlockPages &&
         p.medium_block_pages <= kMaxBlockPages && p.large_block_pages <= kMaxBlockPages &&
         p.small_max <= p.small_block_pages * kPageSize &&
         p.small_max <= kLinearMax && p.medium_block_pages <= kMaxMidBlockPages &&
         std::min(p.medium_max, kLinearMax) <= p.medium_block_pages * kPageSize &&
         // a large block holds its largest object with room to align it (with
         // no large sizes: a page-aligned medium one, see alloc_unsampled)
         (has_large_sizes(p) ? uint64_t{p.large_max} + 2 * sizeof(ChunkHeader) + p.medium_max
                             : uint64_t{p.medium_max} + 2 * sizeof(ChunkHeader) + kPageSize + kNoLargeMinChunkObject) <=
             uint64_t{p.large_block_pages} * kPageSize &&
         (p.mid_block_objects == 0 || (p.mid_block_objects >= kMinObjectsPerMidBlock && p.mid_block_objects <= kMaxMidBlockObjects)) &&
         static_cast<uint32_t>(p.discard_mode) <= static_cast<uint32_t>(DiscardMode::kNever);
}

}  // namespace memd::heap
