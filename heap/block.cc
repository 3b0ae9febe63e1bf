#include "heap/block.h"

namespace memd::heap {

uint32_t block_collect_remote(BlockDesc& b, char* base) {
  uint32_t head = b.remote_head.exchange(0, std::memory_order_seq_cst);
  if (head == 0) return 0;
  // One read-only walk finds the tail. A list longer than the block can hold
  // has a cycle (a double free that raced with itself): it is dropped whole,
  // leaking its objects, before anything reaches the free list twice.
  uint32_t limit = b.end / 16 + 1;
  uint32_t n = 0;
  bool bogus = false;
  char* tail = nullptr;
  for (uint32_t h = head; h != 0; h = link_of(tail)) {
    if (++n > limit) return UINT32_MAX;
    // A remote free cannot see the bump pointer: an object past it was never
    // handed out.
    bogus |= h - 1 >= b.bump;
    tail = base + h - 1;
  }
  if (!bogus) {
    link_of(tail) = b.free_head;
    b.free_head = head;
    b.used -= n;
    return n;
  }
  // Rare: rebuild, dropping the never-allocated objects.
  n = 0;
  while (head != 0) {
    char* p = base + head - 1;
    uint32_t next = link_of(p);
    if (head - 1 < b.bump) {
      link_of(p) = b.free_head;
      b.free_head = head;
      ++n;
    }
    head = next;
  }
  b.used -= n;
  return n;
}

bool block_object_is_free(const BlockDesc& b, const char* base, uint32_t in_block) {
  if (in_block >= b.bump) return true;
  uint32_t limit = b.end / 16 + 1;
  for (uint32_t h = b.free_head; h != 0 && limit--; h = *reinterpret_cast<const uint32_t*>(base + h - 1)) {
    if (h - 1 == in_block) return true;
  }
  limit = b.end / 16 + 1;
  for (uint32_t h = b.remote_head.load(std::memory_order_acquire); h != 0 && limit--;
       h = *reinterpret_cast<const uint32_t*>(base + h - 1)) {
    if (h - 1 == in_block) return true;
  }
  return false;
}

void block_init(BlockDesc& b, uint16_t cls, uint32_t end, bool zeroed) {
  b.free_head = 0;
  b.bump = 0;
  b.used = 0;
  b.cls = cls;
  b.flags = zeroed ? kBlockFreshBump : 0;
  b.prev = b.next = kNoPage;
  b.remote_head.store(0, std::memory_order_relaxed);
  b.pending_next.store(0, std::memory_order_relaxed);
  // `end` last: after a crash, a block whose end is 0 never held an object.
  std::atomic_signal_fence(std::memory_order_release);
  b.end = end;
}

}  // namespace memd::heap
