// Size classes, 8 bytes apart as in Vam. A class index is the object size in
// 8-byte units, so the mapping from a request is one shift. The smallest object
// is 16 bytes: every free object then holds its free-list link and a
// double-free tag (see block.h), and 16-byte requests stay 16-byte aligned.
#pragma once

#include <cstddef>
#include <cstdint>

#include "heap/params.h"
#include "heap/units.h"

namespace memd::heap {

inline constexpr uint32_t kGranule = 8;
inline constexpr uint32_t kMinObject = 16;
inline constexpr uint32_t kMaxSegregatedClasses = 64;  // covers medium_max <= 504

enum class SizeKind : uint8_t { kSegregated, kLarge, kHuge };

// What the heap needs to know about one segregated (small or medium) class.
struct ClassInfo {
  uint32_t size = 0;         // object size in bytes
  uint32_t block_pages = 0;  // pages per block
  uint32_t end = 0;          // objects * size: in-block offset past the last object
  uint32_t reciprocal = 0;   // ceil(2^32 / size): offset / size as a multiply
};

class SizeClasses {
 public:
  explicit SizeClasses(const HeapParams& params);

  // REQUIRES: size <= medium_max.
  static constexpr uint32_t class_of(size_t size) {
    uint32_t cls = static_cast<uint32_t>((size + kGranule - 1) / kGranule);
    return cls < kMinObject / kGranule ? kMinObject / kGranule : cls;
  }
  SizeKind kind_of(size_t size) const {
    if (size <= medium_max_) return SizeKind::kSegregated;
    return size <= large_max_ ? SizeKind::kLarge : SizeKind::kHuge;
  }
  const ClassInfo& info(uint32_t cls) const { return info_[cls]; }
  uint32_t first_class() const { return kMinObject / kGranule; }
  uint32_t last_class() const { return medium_max_ / kGranule; }
  uint32_t medium_max() const { return medium_max_; }
  uint32_t large_max() const { return large_max_; }

  // The index of the object holding in-block offset `off`, exactly.
  static uint32_t object_index(const ClassInfo& c, uint32_t off) {
    return static_cast<uint32_t>((uint64_t{off} * c.reciprocal) >> 32);
  }

 private:
  uint32_t medium_max_;
  uint32_t large_max_;
  ClassInfo info_[kMaxSegregatedClasses];
};

}  // namespace memd::heap
