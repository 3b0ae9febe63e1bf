#include "heap/size_class.h"

namespace memd::heap {

SizeClasses::SizeClasses(const HeapParams& params)
    : medium_max_(params.medium_max), large_max_(params.large_max) {
  for (uint32_t cls = first_class(); cls <= last_class(); ++cls) {
    ClassInfo& c = info_[cls];
    c.size = cls * kGranule;
    c.block_pages = c.size <= params.small_max ? params.small_block_pages
                                               : params.medium_block_pages;
    uint32_t bytes = c.block_pages * static_cast<uint32_t>(kPageSize);
    c.end = bytes / c.size * c.size;
    c.reciprocal = static_cast<uint32_t>(((uint64_t{1} << 32) + c.size - 1) / c.size);
  }
}

}  // namespace memd::heap
