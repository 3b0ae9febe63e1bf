// Size classes. Up to 512 bytes a class index is the object size in 8-byte
// units, as in Vam, so the mapping from a request is a shift; but requests
// take only the classes of multiples of 16 (16, 32, 48, ..., 512). malloc owes
// every request the alignment of any type that fits in it (C17 7.22.3), which
// on x86-64 is 16 for anything over 8 bytes (long double, __int128, SSE), and
// glibc, jemalloc, mimalloc and tcmalloc all give it; a 24-byte stride gives
// every other object only 8. The odd indices stay in the table, so a region's
// layout does not change and objects of those classes in regions made before
// are still freed through their blocks. Above 512, up to kMaxMediumMax, four
// classes per doubling (640, 768, 896, 1024, 1280, ..., 65536): segregated
// blocks serve mid sizes at the cost of small-object allocation, and no
// request wastes more than a quarter of its object. The smallest object is 16
// bytes: every free object then holds its free-list link and a double-free
// tag (see block.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "heap/params.h"
#include "heap/units.h"

namespace memd::heap {

inline constexpr uint32_t kGranule = 8;
inline constexpr uint32_t kMinObject = 16;
inline constexpr uint32_t kObjectAlign = 16;       // every object handed out is this aligned
inline constexpr uint32_t kLinearMax = 512;        // largest class of the 8-byte spaced ones
inline constexpr uint32_t kMaxMediumMax = 65536;   // largest segregated class there can be
inline constexpr uint32_t kLinearClasses = kLinearMax / kGranule + 1;  // indices 0..64
// 4 per doubling from 512 to 65536.
inline constexpr uint32_t kMaxSegregatedClasses = kLinearClasses + 4 * 7;
// A mid-size block holds HeapParams::mid_block_objects objects (8 by
// default) where kMaxMidBlockPages allow, so that a block change (a slow
// path: a list move, often a page-heap call) comes at most once per that
// many allocations. With 4, objects freed at random emptied and refilled
// blocks at nearly every call (a daemon client churning 1-32 KiB objects
// leased or released a block every 47,710 allocations; with 8, every
// 1,250,000: bench/results/daemon-2026-11-29-8.md); never fewer than this
// many (params_valid keeps medium_max within it; regions made before the
// field hold 0: 4),
inline constexpr uint32_t kMinObjectsPerMidBlock = 4;
inline uint32_t mid_block_objects(const HeapParams& p) {
  return p.mid_block_objects == 0 ? kMinObjectsPerMidBlock : p.mid_block_objects;
}
// and a block spans at most this many pages (256 KiB, the size of 4 objects
// of the largest class): blocks of a class a process uses little hold at
// most that much address space, and since a block is filled by bumping, no
// more memory than its objects touched. (mimalloc's pages for these sizes
// are 512 KiB.)
inline constexpr uint32_t kMaxMidBlockPages = 64;

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

  // The class a request of `size` bytes is served from: every one is a
  // multiple of kObjectAlign bytes. REQUIRES: size <= kMaxMediumMax.
  static constexpr uint32_t class_of(size_t size) {
    if (size <= kLinearMax) {
      uint32_t cls = static_cast<uint32_t>((size + kObjectAlign - 1) / kObjectAlign) * (kObjectAlign / kGranule);
      return cls < kMinObject / kGranule ? kMinObject / kGranule : cls;
    }
    // size - 1 in [2^b, 2^(b+1)): four classes of 2^(b-2) bytes each.
    uint32_t s = static_cast<uint32_t>(size - 1);
    uint32_t b = 31 - static_cast<uint32_t>(__builtin_clz(s));
    return kLinearClasses + (b - 9) * 4 + ((s >> (b - 2)) & 3);
  }
  // Whether `size` is the object size of a class of the table: handed out
  // now, or (an odd multiple of 8 up to kLinearMax) by regions made before.
  static constexpr bool is_class_size(uint32_t size) {
    if (size < kMinObject || size > kMaxMediumMax) return false;
    if (size <= kLinearMax) return size % kGranule == 0;
    return size_of_class(class_of(size)) == size;
  }
  // The object size of class `cls` (any index below kMaxSegregatedClasses).
  static constexpr uint32_t size_of_class(uint32_t cls) {
    if (cls < kLinearClasses) return cls * kGranule;
    uint32_t k = cls - kLinearClasses;
    return (5 + k % 4) << (k / 4 + 7);
  }
  // The index of the last class of a table that ends at `medium_max` (a
  // class size).
  static constexpr uint32_t table_end(uint32_t medium_max) {
    return medium_max <= kLinearMax ? medium_max / kGranule : class_of(medium_max);
  }
  // The largest request a table ending at `medium_max` serves from a class.
  // A region made when requests took the classes 8 bytes apart may end its
  // table at an odd multiple of 8 (24, 40, ..., 504), a class no request
  // takes now: the class below is the last one served, and the 8 bytes
  // between go to the large path (with no large sizes, large blocks take
  // any size up to medium_max).
  static constexpr uint32_t serving_max(uint32_t medium_max) {
    return medium_max <= kLinearMax ? medium_max / kObjectAlign * kObjectAlign : medium_max;
  }
  SizeKind kind_of(size_t size) const {
    if (size <= medium_max_) return SizeKind::kSegregated;
    return size <= large_max_ ? SizeKind::kLarge : SizeKind::kHuge;
  }
  const ClassInfo& info(uint32_t cls) const { return info_[cls]; }
  uint32_t first_class() const { return kMinObject / kGranule; }
  // The table's last class (the params' medium_max): blocks of every class
  // up to it may be in the region.
  uint32_t last_class() const { return last_class_; }
  // The largest request served from a class (serving_max of the params').
  uint32_t medium_max() const { return medium_max_; }
  uint32_t large_max() const { return large_max_; }

  // The index of the object holding in-block offset `off`, exactly at every
  // object start (object_index(c, k * size) == k), which is all free needs.
  static uint32_t object_index(const ClassInfo& c, uint32_t off) {
    return static_cast<uint32_t>((uint64_t{off} * c.reciprocal) >> 32);
  }

 private:
  uint32_t medium_max_;
  uint32_t last_class_;
  uint32_t large_max_;
  ClassInfo info_[kMaxSegregatedClasses];
};

static_assert(SizeClasses::class_of(kMaxMediumMax) == kMaxSegregatedClasses - 1);
static_assert(SizeClasses::size_of_class(kMaxSegregatedClasses - 1) == kMaxMediumMax);
static_assert(SizeClasses::size_of_class(SizeClasses::class_of(17)) == 32 &&
              SizeClasses::size_of_class(SizeClasses::class_of(8)) == kMinObject);
static_assert(SizeClasses::table_end(504) == 63 && SizeClasses::serving_max(504) == 496 &&
              SizeClasses::table_end(kMaxMediumMax) == kMaxSegregatedClasses - 1 &&
              SizeClasses::serving_max(kMaxMediumMax) == kMaxMediumMax);
static_assert(SizeClasses::class_of(513) == kLinearClasses && SizeClasses::size_of_class(kLinearClasses) == 640);

}  // namespace memd::heap
