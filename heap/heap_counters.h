// What a thread heap did, for telemetry: allocations and frees per size
// class, and of large and huge objects with their bytes. Each counter has
// one writer (the heap's thread), so an increment needs no locked
// instruction (see count_one); relaxed atomics let a reporter thread read
// them at any time. The arena's stranger is shared by threads: there a
// concurrent increment may be lost, never torn.
#pragma once

#include <atomic>
#include <cstdint>

#include "heap/counter_snapshot.h"
#include "heap/size_class.h"

namespace memd::heap {

#if defined(MEMD_NO_COUNTERS)
// Counting compiled out (CMake -DMEMD_COUNTERS=OFF): the build the counters'
// cost is measured against (bench/counter_cost.py). Telemetry reads zeros.
inline void count_add(std::atomic<uint64_t>&, uint64_t) {}
inline void count_one(std::atomic<uint64_t>&) {}
#elif defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
// One instruction instead of a load, an add and a store (compilers do not
// merge relaxed atomic accesses). Not a locked add: there is one writer, and
// on x86-64 a reader's aligned 8-byte load sees the value before or after,
// never a torn one -- what the relaxed load and store below promise. The
// counter's storage is what std::atomic<uint64_t> holds (standard layout).
static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t));
inline void count_add(std::atomic<uint64_t>& c, uint64_t n) {
  asm volatile("addq %1, %0" : "+m"(*reinterpret_cast<uint64_t*>(&c)) : "er"(n) : "cc");
}
inline void count_one(std::atomic<uint64_t>& c) {
  asm volatile("addq $1, %0" : "+m"(*reinterpret_cast<uint64_t*>(&c)) : : "cc");
}
#else
// ThreadSanitizer sees these (it cannot see into asm).
inline void count_one(std::atomic<uint64_t>& c) {
  c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}
inline void count_add(std::atomic<uint64_t>& c, uint64_t n) {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}
#endif

// Segregated classes: bytes are the class size times the count.
struct ClassCount {
  std::atomic<uint64_t> allocs{0};
  std::atomic<uint64_t> frees{0};
};

// Large and huge objects: bytes are usable bytes (what free gives back).
struct BigCount {
  std::atomic<uint64_t> allocs{0};
  std::atomic<uint64_t> frees{0};
  std::atomic<uint64_t> alloc_bytes{0};
  std::atomic<uint64_t> freed_bytes{0};
};

// A big object resized in place from `before` to `after` usable bytes:
// growth counts as allocated bytes and shrinkage as freed bytes, so live
// bytes (allocated - freed) stay exact and both totals only grow.
inline void count_resized(BigCount& c, uint64_t before, uint64_t after) {
  if (after > before) count_add(c.alloc_bytes, after - before);
  else count_add(c.freed_bytes, before - after);
}

// A heap's counts of big objects and samples. Its per-class counts live in
// its class lists, beside what the fast paths touch (ThreadHeap::ClassList):
// an increment there is one instruction on a line already in cache.
struct HeapCounters {
  BigCount large;
  BigCount huge;
  std::atomic<uint64_t> samples{0};
};

// Adds one class's counts, and a heap's big-object counts, to a snapshot.
inline void add_class_counts(CounterSnapshot* out, uint32_t cls, const ClassCount& c) {
  out->classes[cls].allocs += c.allocs.load(std::memory_order_relaxed);
  out->classes[cls].frees += c.frees.load(std::memory_order_relaxed);
}
inline void add_big_counts(CounterSnapshot::Big* out, const BigCount& c) {
  out->allocs += c.allocs.load(std::memory_order_relaxed);
  out->frees += c.frees.load(std::memory_order_relaxed);
  out->alloc_bytes += c.alloc_bytes.load(std::memory_order_relaxed);
  out->freed_bytes += c.freed_bytes.load(std::memory_order_relaxed);
}
inline void add_heap_counts(CounterSnapshot* out, const HeapCounters& c) {
  add_big_counts(&out->large, c.large);
  add_big_counts(&out->huge, c.huge);
  out->samples += c.samples.load(std::memory_order_relaxed);
}

static_assert(kCounterClassSlots == kMaxSegregatedClasses, "a snapshot holds every size class");

}  // namespace memd::heap
