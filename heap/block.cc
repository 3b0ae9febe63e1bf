#include "heap/block.h"

#include "heap/crash_point.h"
#include "heap/remote_free.h"

namespace memd::heap {

namespace {

// The checked collection of a list taken from B. One read-only walk finds
// the tail and the count, and whether any object lies past the bump pointer.
// A list longer than the block can hold has a cycle, one that leaves the
// block is garbage, and one with more objects than are out cannot be true:
// it is dropped whole, leaking its objects, before anything reaches the free
// list twice.
uint32_t collect_walking(BlockDesc& b, char* base, uint32_t head) {
  if (head == 0) return 0;
  uint32_t limit = b.end / 16 + 1;
  uint32_t n = 0, kept = 0;
  char* tail = nullptr;
  for (uint32_t h = head; h != 0; h = link_of(tail)) {
    if (++n > limit || h - 1 >= b.end) return UINT32_MAX;
    // A remote free cannot see the bump pointer: an object past it was never
    // handed out.
    kept += h - 1 < b.bump;
    tail = base + h - 1;
  }
  if (kept > b.used) return UINT32_MAX;
  if (kept == n) {
    link_of(tail) = b.free_head;
    b.free_head = head;
    b.used -= n;
    return n;
  }
  // Rare: rebuild, dropping the never-allocated objects. Each move rewrites
  // the object's link, so the taken word follows along (remote_free.h).
  n = 0;
  while (head != 0) {
    char* p = base + head - 1;
    uint32_t next = link_of(p);
    if (head - 1 < b.bump) {
      remote_taken_at(b, head, next);
      link_of(p) = b.free_head;
      b.free_head = head;
      ++n;
    }
    head = next;
  }
  b.used -= n;
  return n;
}

// Moves the list `w`, taken from B (remote_take), onto B's free list.
uint32_t move_taken(BlockDesc& b, char* base, uint64_t w) {
  RemoteList l = RemoteList::unpack(w);
  // Every object below `end` was handed out, and every push is of an object
  // start below `end` (free checks both): the list holds no object that was
  // never allocated, as long as the word is sane.
  bool whole = b.bump >= b.end && l.count != 0 && l.count <= b.used && l.head != 0 && l.tail != 0 &&
               l.head - 1 < b.end && l.tail - 1 < b.end;
  if (__builtin_expect(whole, 1)) {
    if (b.free_head == 0) {
      b.free_head = l.head;
      b.used -= l.count;
      return l.count;
    }
    // The tail's link is 0, as its push wrote it; anything else says the
    // word and the objects disagree.
    char* tail = base + l.tail - 1;
    if (link_of(tail) == 0) {
      link_of(tail) = b.free_head;
      b.free_head = l.head;
      b.used -= l.count;
      return l.count;
    }
  }
  return collect_walking(b, base, l.head);
}

}  // namespace

uint32_t block_collect_remote(BlockDesc& b, char* base) {
  uint64_t w = remote_take(b);
  if (w == 0) return 0;
  crash_point("block.remote_taken");  // the list is off B.remote, not yet on the free list
  uint32_t n = move_taken(b, base, w);
  // `used` is the owner's; the free list is whole again: nothing taken is held.
  remote_taken_done(b);
  return n;
}

bool block_object_is_free(const BlockDesc& b, const char* base, uint32_t in_block) {
  if (in_block >= b.bump) return true;
  uint32_t limit = b.end / 16 + 1;
  for (uint32_t h = b.free_head; h != 0 && limit--; h = *reinterpret_cast<const uint32_t*>(base + h - 1)) {
    if (h - 1 == in_block) return true;
  }
  limit = b.end / 16 + 1;
  for (uint32_t h = RemoteList::head_of(b.remote.load(std::memory_order_acquire)); h != 0 && limit--;
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
  set_descriptors_durable(b, false);
  b.flags = zeroed ? kBlockFreshBump : 0;
  b.prev = b.next = kNoPage;
  b.remote.store(0, std::memory_order_relaxed);
  b.pending_next.store(0, std::memory_order_relaxed);
  b.taken = 0;
  // `end` last: after a crash, a block whose end is 0 never held an object.
  std::atomic_signal_fence(std::memory_order_release);
  b.end = end;
}

}  // namespace memd::heap
