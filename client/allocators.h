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

// An STL allocator for node containers (std::list, std::set, std::map, the
// unordered ones): single nodes come from a small cache that one
// Heap::alloc_batch call fills, and freed nodes go back into it; what it
// holds past its size, and all of it when the allocator is destroyed, goes
// back with one Heap::free_batch. Every other request (arrays, bucket
// tables, over-aligned types) is Allocator's. The cache is the allocator
// object's own: a copy or a rebind starts empty, so a container (which
// keeps one rebound copy) has one, and containers on different threads
// share none. Nodes are freed by any copy (the heap is what compares).
template <class T, size_t kBatch = 16>
class NodeAllocator {
 public:
  using value_type = T;
  template <class U>
  struct rebind {
    using other = NodeAllocator<U, kBatch>;
  };
  explicit NodeAllocator(Heap& heap) noexcept : heap_(&heap) {}
  template <class U>
  NodeAllocator(const NodeAllocator<U, kBatch>& other) noexcept : heap_(&other.heap()) {}
  NodeAllocator(const NodeAllocator& other) noexcept : heap_(other.heap_) {}
  NodeAllocator& operator=(const NodeAllocator& other) noexcept {
    if (this != &other) {
      release_spares();
      heap_ = other.heap_;
    }
    return *this;
  }
  ~NodeAllocator() { release_spares(); }

  T* allocate(size_t n) {
    if (n != 1 || !kBatched) return Allocator<T>(*heap_).allocate(n);
    if (count_ == 0) {
      count_ = heap_->alloc_batch(kBatch, sizeof(T), spare_);
      if (count_ == 0) throw std::bad_alloc();
    }
    return static_cast<T*>(spare_[--count_]);
  }
  void deallocate(T* p, size_t n) noexcept {
    if (n != 1 || !kBatched) return heap_->free(p);
    if (count_ == 2 * kBatch) {  // full: the older half goes back at once
      heap_->free_batch(spare_, kBatch);
      for (size_t i = 0; i < kBatch; ++i) spare_[i] = spare_[kBatch + i];
      count_ = kBatch;
    }
    spare_[count_++] = p;
  }
  Heap& heap() const noexcept { return *heap_; }
  size_t spares() const noexcept { return count_; }

  template <class U>
  bool operator==(const NodeAllocator<U, kBatch>& o) const noexcept {
    return heap_ == &o.heap();
  }

 private:
  // alloc_batch's objects keep the alignment of their size class, at least
  // 8 bytes: an over-aligned node takes the single calls.
  static constexpr bool kBatched = alignof(T) <= 8;
  void release_spares() noexcept {
    if (count_ != 0) heap_->free_batch(spare_, count_);
    count_ = 0;
  }
  Heap* heap_;
  size_t count_ = 0;
  void* spare_[2 * kBatch];
};

}  // namespace memd
