// ThreadHeap::alloc_near: allocation hints after the TP/Medius slides. A
// container that passes the element it links to (the previous node, the
// parent) gets a free object of that element's block -- often of its page
// or cache line -- so a traversal touches fewer lines and pages. Only the
// owner's own blocks are taken from, so it is a local, lock-free pop like
// the fast path's.
#include <cstdint>

#include "heap/block.h"
#include "heap/heap_counters.h"
#include "heap/thread_heap.h"

namespace memd::heap {

void* ThreadHeap::alloc_near(size_t size, const void* hint, size_t near_bytes) {
  const char* h = static_cast<const char*>(hint);
  if (h == nullptr || size > medium_max_ || !region_.contains(hint)) return alloc(size);
  // Charged once, here: the countdown's end makes a sample (placed where
  // samples go) or not, and a hint is honoured either way -- whether it is
  // must not hang on where an unseen countdown happens to end.
  if ((sample_countdown_ -= static_cast<int64_t>(size)) < 0 && sample_due(size)) return alloc_sample(size, 0, nullptr);
  uint32_t cls = SizeClasses::class_of(size);
  uint64_t desc = page_descs_[(h - data_) >> kPageShift].load(std::memory_order_acquire);
  PageDesc d = PageDesc::unpack(desc);
  if (d.kind != PageKind::kSegregated || d.cls != cls) return alloc_segregated(cls);
  BlockDesc& b = blocks_[d.block];
  // A block of another thread, or one in the empty cache (whose count the
  // cache keeps), is not ours to take from. A full block is: the objects
  // freed into it since it filled wait there until it is available again
  // (ThreadHeap::kUnfullFraction).
  if (owner_of(b.owner_word.load(std::memory_order_relaxed)) != id_ || (b.flags & kBlockCached) ||
      b.used == 0) {
    return alloc_segregated(cls);
  }
  char* base = data_ + (Offset{d.block} << kPageShift);
  ClassList& cl = class_list(cls);
  auto near = [&](const char* p) { return static_cast<uint64_t>(p > h ? p - h : h - p) <= near_bytes; };
  // The first free objects of the block: one near enough is unlinked. Else
  // its bump space, if near enough; else, when the whole block counts as
  // near, its first free object.
  char* p = nullptr;
  uint32_t* link = &b.free_head;
  for (int probe = 0; probe < kNearProbes && *link != 0 && p == nullptr; ++probe) {
    char* candidate = base + *link - 1;
    if (near(candidate)) p = block_unlink_free(b, link, candidate);
    else link = &link_of(candidate);
  }
  if (p == nullptr && b.bump < b.end && near(base + b.bump)) {
    p = block_pop_bump(b, base, cl.size);
  } else if (p == nullptr && near_bytes >= b.end && b.free_head != 0) {
    p = block_pop_free(b, base, b.free_head);
  }
  if (p == nullptr) return alloc_segregated(cls);
  count_one(cl.counts.allocs);
  return p;
}

}  // namespace memd::heap
