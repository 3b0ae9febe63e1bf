// Units of the heap. Pages, page indices and byte offsets are distinct types so
// that one cannot be passed where another is meant. All are plain values that
// live inside shared regions, so they are fixed-width and trivially copyable.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>

namespace memd::heap {

inline constexpr uint32_t kPageShift = 12;
inline constexpr size_t kPageSize = size_t{1} << kPageShift;

// A number of pages.
struct PageCount {
  uint32_t value = 0;
  constexpr size_t bytes() const { return size_t{value} << kPageShift; }
  friend constexpr bool operator==(PageCount, PageCount) = default;
  friend constexpr auto operator<=>(PageCount, PageCount) = default;
};

// The index of a data page, counted from the first data page of a region.
struct PageIndex {
  uint32_t value = 0;
  friend constexpr bool operator==(PageIndex, PageIndex) = default;
  friend constexpr auto operator<=>(PageIndex, PageIndex) = default;
  constexpr PageIndex operator+(PageCount n) const { return {value + n.value}; }
  constexpr PageIndex operator-(PageCount n) const { return {value - n.value}; }
  constexpr PageCount operator-(PageIndex o) const { return {value - o.value}; }
};

// "No page": list terminators and empty links.
inline constexpr PageIndex kNoPage{UINT32_MAX};

// Rounds a byte count up to whole pages.
constexpr PageCount pages_for(size_t bytes) {
  return {static_cast<uint32_t>((bytes + kPageSize - 1) >> kPageShift)};
}

// A byte offset from the start of a region's data pages. Position independent:
// each process adds its own mapping address.
using Offset = uint64_t;

// Identifies the owner of a block: a thread heap of some process. 0 is "none".
using OwnerId = uint32_t;
inline constexpr OwnerId kNoOwner = 0;

}  // namespace memd::heap
