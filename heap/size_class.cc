#include "heap/size_class.h"

#include <algorithm>

namespace memd::heap {
namespace {

// Pages per block of a mid-size class (above kLinearMax): the fewest, from
// `min_pages`, that hold `wanted` objects (or as many as
// kMaxMidBlockPages do, never under kMinObjectsPerMidBlock) and lose at most
// 1/16 of the block to the tail; else the least wasteful up to
// kMaxMidBlockPages.
uint32_t mid_block_pages(uint32_t size, uint32_t min_pages, uint32_t wanted) {
  uint32_t objects = std::min(wanted, kMaxMidBlockPages * static_cast<uint32_t>(kPageSize) / size);
  uint32_t best = 0;
  uint64_t best_waste_ratio = UINT64_MAX;  // waste / bytes, in 1/2^20
  for (uint32_t pages = min_pages; pages <= kMaxMidBlockPages; ++pages) {
    uint32_t bytes = pages * static_cast<uint32_t>(kPageSize);
    if (bytes / size < objects) continue;
    uint32_t waste = bytes % size;
    if (waste * 16 <= bytes) return pages;
    uint64_t ratio = (uint64_t{waste} << 20) / bytes;
    if (ratio < best_waste_ratio) {
      best_waste_ratio = ratio;
      best = pages;
    }
  }
  return best;
}

}  // namespace

SizeClasses::SizeClasses(const HeapParams& params)
    : medium_max_(serving_max(params.medium_max)),
      last_class_(table_end(params.medium_max)),
      large_max_(params.large_max) {
  for (uint32_t cls = first_class(); cls <= last_class(); ++cls) {
    ClassInfo& c = info_[cls];
    c.size = size_of_class(cls);
    if (c.size <= params.small_max) c.block_pages = params.small_block_pages;
    else if (c.size <= kLinearMax) c.block_pages = params.medium_block_pages;
    else c.block_pages = mid_block_pages(c.size, params.medium_block_pages, mid_block_objects(params));
    uint32_t bytes = c.block_pages * static_cast<uint32_t>(kPageSize);
    c.end = bytes / c.size * c.size;
    c.reciprocal = static_cast<uint32_t>(((uint64_t{1} << 32) + c.size - 1) / c.size);
  }
}

}  // namespace memd::heap
