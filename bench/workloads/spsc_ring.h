// A single-producer, single-consumer ring of pointers. Objects go in and
// come out in batches, one index update per batch, so the hand-over costs a
// few cache-line transfers per batch and the time of the cross-thread
// workloads goes to malloc and free. Its slots are allocated once, before any
// measured allocation.
#pragma once

#include <atomic>
#include <cstddef>
#include <vector>

class SpscRing {
 public:
  // REQUIRES: capacity is a power of two.
  explicit SpscRing(size_t capacity) : slots_(capacity), mask_(capacity - 1) {}

  // Producer side: all n items, or none (false) if they do not fit.
  bool push_all(void* const* items, size_t n) {
    size_t tail = tail_.load(std::memory_order_relaxed);
    if (slots_.size() - (tail - head_cache_) < n) {
      head_cache_ = head_.load(std::memory_order_acquire);
      if (slots_.size() - (tail - head_cache_) < n) return false;
    }
    for (size_t i = 0; i < n; ++i) slots_[(tail + i) & mask_] = items[i];
    tail_.store(tail + n, std::memory_order_release);
    return true;
  }

  // Consumer side: up to `max` items into `out`; returns how many.
  size_t pop_some(void** out, size_t max) {
    size_t head = head_.load(std::memory_order_relaxed);
    if (tail_cache_ - head < max) tail_cache_ = tail_.load(std::memory_order_acquire);
    size_t n = tail_cache_ - head < max ? tail_cache_ - head : max;
    for (size_t i = 0; i < n; ++i) out[i] = slots_[(head + i) & mask_];
    if (n > 0) head_.store(head + n, std::memory_order_release);
    return n;
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
