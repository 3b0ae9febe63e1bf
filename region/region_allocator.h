// memd::RegionAllocator<T>: an allocator for standard containers that live
// inside a shared or persistent region. Its pointer type is offset_ptr<T>,
// and the allocator itself holds only an offset_ptr to the region's base,
// so a container built in one process is read and changed in another, and
// survives a restart of a file region.
//
//   using IntVector = std::vector<int, memd::RegionAllocator<int>>;
//   auto* v = region.find_or_construct<IntVector>("numbers", memd::RegionAllocator<int>(region));
//   v->push_back(42);  // in any process that has the region open
//
// vector and basic_string work wherever each process maps the region;
// libstdc++ 12's node containers (map, set, list, unordered_*) keep raw
// pointers in their nodes (see offset_ptr.h) and work across processes only
// where Region::at_preferred_address() holds — memd maps every region at
// its creator's address whenever that range is free.
#pragma once

#include <cstddef>
#include <new>

#include "region/offset_ptr.h"
#include "region/region.h"

namespace memd {

// The Region object through which this process mapped the region whose
// mapping starts at `base`; nullptr if none. Lock-free.
Region* region_at(const void* base) noexcept;

template <class T>
class RegionAllocator {
 public:
  using value_type = T;
  using pointer = offset_ptr<T>;
  using const_pointer = offset_ptr<const T>;
  using void_pointer = offset_ptr<void>;
  using const_void_pointer = offset_ptr<const void>;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;
  using is_always_equal = std::false_type;
  template <class U>
  struct rebind {
    using other = RegionAllocator<U>;
  };

  explicit RegionAllocator(const Region& region) noexcept : base_(region.base()) {}
  RegionAllocator(const RegionAllocator& other) noexcept : base_(other.base_.get()) {}
  template <class U>
  RegionAllocator(const RegionAllocator<U>& other) noexcept : base_(other.base()) {}
  RegionAllocator& operator=(const RegionAllocator& other) noexcept {
    base_ = other.base_.get();
    return *this;
  }

  pointer allocate(size_type n) {
    Region* r = region_at(base_.get());
    if (r == nullptr || n > SIZE_MAX / sizeof(T)) throw std::bad_alloc();
    void* p = alignof(T) <= 16 ? r->alloc(n * sizeof(T)) : r->alloc_aligned(n * sizeof(T), alignof(T));
    if (p == nullptr) throw std::bad_alloc();
    return pointer(static_cast<T*>(p));
  }
  // A container's hint (the element the new one will sit by), through
  // std::allocator_traits: the object lands near it when it can.
  pointer allocate(size_type n, const_void_pointer hint) {
    Region* r = region_at(base_.get());
    if (r == nullptr || hint.get() == nullptr || alignof(T) > 8 || n > SIZE_MAX / sizeof(T)) return allocate(n);
    void* p = r->alloc_near(n * sizeof(T), hint.get());
    if (p == nullptr) throw std::bad_alloc();
    return pointer(static_cast<T*>(p));
  }
  void deallocate(pointer p, size_type) noexcept {
    if (Region* r = region_at(base_.get())) r->free(p.get());
  }

  // The region's mapping in this process.
  char* base() const noexcept { return base_.get(); }

  template <class U>
  bool operator==(const RegionAllocator<U>& other) const noexcept {
    return base() == other.base();
  }

 private:
  offset_ptr<char> base_;
};

}  // namespace memd
