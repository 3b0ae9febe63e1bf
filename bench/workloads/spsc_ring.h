// A single-producer, single-consumer ring of pointers. It hands objects from
// one thread to another one at a time at a cost of a few nanoseconds, so in
// the cross-thread workloads the time goes to malloc and free, not to the
// hand-over. Its slots are allocated once, before any measured allocation.
#pragma once

#include <atomic>
#include <cstddef>
#include <vector>

class SpscRing {
 public:
  // REQUIRES: capacity is a power of two.
  explicit SpscRing(size_t capacity) : slots_(capacity), mask_(capacity - 1) {}

  // Producer side. False when full.
  bool push(void* p) {
    size_t tail = tail_.load(std::memory_order_relaxed);
    if (tail - head_cache_ == slots_.size()) {
      head_cache_ = head_.load(std::memory_order_acquire);
      if (tail - head_cache_ == slots_.size()) return false;
    }
    slots_[tail & mask_] = p;
    tail_.store(tail + 1, std::memory_order_release);
    return true;
  }

  // Consumer side. nullptr when empty.
  void* pop() {
    size_t head = head_.load(std::memory_order_relaxed);
    if (head == tail_cache_) {
      tail_cache_ = tail_.load(std::memory_order_acquire);
      if (head == tail_cache_) return nullptr;
    }
    void* p = slots_[head & mask_];
    head_.store(head + 1, std::memory_order_release);
    return p;
  }

 private:
  std::vector<void*> slots_;
  size_t mask_;
  // Each side's index and its cached copy of the other side's index share a
  // cache line that only that side writes.
  alignas(64) std::atomic<size_t> head_{0};
  size_t tail_cache_ = 0;  // consumer's copy of tail_
  alignas(64) std::atomic<size_t> tail_{0};
  size_t head_cache_ = 0;  // producer's copy of head_
};
