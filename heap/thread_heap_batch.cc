// ThreadHeap::alloc_batch: n objects of one size for the price of one
// class lookup, one sampling decision and one count per block drained.
#include <cerrno>
#include <cstdint>

#include "heap/block.h"
#include "heap/heap_counters.h"
#include "heap/thread_heap.h"

namespace memd::heap {

size_t ThreadHeap::alloc_batch(size_t n, size_t size, void** out) {
  size_t got = 0;
  uint64_t bytes;
  // Big objects, and a batch that would reach the next sample, take the
  // single calls: each then decides its own sampling as alloc() does.
  if (size > medium_max_ || __builtin_mul_overflow(n, size, &bytes) ||
      static_cast<int64_t>(bytes) < 0 || sample_countdown_ - static_cast<int64_t>(bytes) < 0) {
    for (; got < n; ++got) {
      void* p = alloc(size);
      if (p == nullptr) return got;
      out[got] = p;
    }
    return got;
  }
  sample_countdown_ -= static_cast<int64_t>(bytes);
  uint32_t cls = SizeClasses::class_of(size);
  ClassList& cl = class_list(cls);
  while (got < n) {
    BlockDesc& b = *cl.cur;
    char* base = cl.cur_base;
    size_t start = got;
    for (uint32_t head = b.free_head; head != 0 && got < n; head = b.free_head) {
      out[got++] = block_pop_free(b, base, head);
    }
    count_add(cl.counts.allocs, got - start);
    if (got == n) break;
    // The free list is dry: bump space, remote frees, another block.
    void* p = alloc_slow(cls);
    if (p == nullptr) {
      errno = ENOMEM;
      break;
    }
    out[got++] = p;
  }
  return got;
}

}  // namespace memd::heap
