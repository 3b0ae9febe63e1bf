// Standard-library adapters over memd::Heap: an std::pmr::memory_resource and
// an STL allocator. Both throw std::bad_alloc when the heap is exhausted, as
// the standard requires.
#pragma once

#include <cstddef>
#include <limits>
#include <memory_resource>
#include <new>

#include "client/heap.h"

namespace memd {

class HeapResource final : public std::pmr::memory_resource {
 public:
  explicit HeapResource(Heap& heap) : heap_(&heap) {}
  Heap& heap() const { return *heap_; }

 private:
  void* do_allocate(size_t bytes, size_t align) override {
    void* p = heap_->alloc_aligned(bytes, align);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  void do_deallocate(void* p, size_t, size_t) override { heap_->free(p); }
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
    auto* o = dynamic_cast<const HeapResource*>(&other);
    return o != nullptr && o->heap_ == heap_;
  }
  Heap* heap_;
};

template <class T>
class Allocator {
 public:
  using value_type = T;
  explicit Allocator(Heap& heap) noexcept : heap_(&heap) {}
  template <class U>
  Allocator(const Allocator<U>& other) noexcept : heap_(&other.heap()) {}

  T* allocate(size_t n) {
    if (n > std::numeric_limits<size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
    void* p = heap_->alloc_aligned(n * sizeof(T), alignof(T));
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  // std::allocator_traits passes a container's hint here (the element the
  // new one will sit by): the object lands near it when it can.
  T* allocate(size_t n, const void* hint) {
    if (hint == nullptr || alignof(T) > 8 || n > std::numeric_limits<size_t>::max() / sizeof(T)) return allocate(n);
    void* p = heap_->alloc_near(n * sizeof(T), hint);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) noexcept { heap_->free(p); }
  Heap& heap() const noexcept { return *heap_; }

  template <class U>
  bool operator==(const Allocator<U>& o) const noexcept { return heap_ == &o.heap(); }

 private:
  Heap* heap_;
};

}  // namespace memd
