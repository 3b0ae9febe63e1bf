// A plain copy of a heap's counters, summed across thread heaps: what
// Region::counters() and Heap::counters() return. No dependency, so the
// public headers can return it without pulling in the heap; the live
// counters it is summed from are in heap/heap_counters.h.
#pragma once

#include <cstdint>

namespace memd::heap {

// One slot per segregated size class (heap/size_class.h asserts that this
// is kMaxSegregatedClasses).
inline constexpr uint32_t kCounterClassSlots = 93;

struct CounterSnapshot {
  struct Class {
    uint64_t allocs = 0, frees = 0;
  } classes[kCounterClassSlots];
  struct Big {
    uint64_t allocs = 0, frees = 0, alloc_bytes = 0, freed_bytes = 0;
  } large, huge;
  uint64_t samples = 0;
};

}  // namespace memd::heap
