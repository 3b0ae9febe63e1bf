// The lookaside of empty blocks (thread_heap.h, ParkedBlocks): a thread
// heap's empty blocks past the one each class keeps wait here, still its own,
// for the next class that needs a block of the same length. Reusing one
// rewrites the block's page descriptors and formats it: no lock, no search of
// the page heap's bins, no coalescing and no system call, where the page
// heap would take its lock twice (release, then acquire) and write every
// page's descriptor as well.
//
// Why this is safe without the page heap's lock: a parked block stays owned
// by this heap and stays a segregated block, so no other thread takes it
// (only abandoned and free blocks are taken) and a neighbour's coalescing,
// which reads its first and last page descriptors, sees an in-use block
// throughout. Nothing in it is live (used == 0 counts every object not yet
// back with the owner), so a free that reaches it is stale: the free tag or
// the bump bound refuses it, as in any block of ours.
#include "heap/thread_heap.h"

namespace memd::heap {

bool ThreadHeap::park_block(ClassList& cl, BlockDesc& b) {
  if (!parking_allowed_ || b.kind != PageKind::kSegregated || b.pages.value > kParkedMaxPages) return false;
  // A notification in flight settles first; handle_empty decides then.
  if (b.owner_word.load(std::memory_order_acquire) != (id_ << 1)) return false;
  ParkedBlocks& k = parked_;
  // Make room, oldest first. One whose notification is in flight stays;
  // then this block goes back instead.
  for (uint32_t i = 0; i < k.count && (k.count >= kParkedSlots || k.pages + b.pages.value > kParkedMaxPages);) {
    if (!release_parked(i)) ++i;
  }
  if (k.count >= kParkedSlots || k.pages + b.pages.value > kParkedMaxPages) return false;
  PageIndex p = region_.index_of(b);
  list_remove(b.flags & kBlockFull ? &cl.full : &cl.avail, p);
  b.flags = static_cast<uint8_t>((b.flags & ~(kBlockFull | kBlockCached)) | kBlockParked);
  k.blocks[k.count] = p;
  k.parked_at[k.count] = k.clock;
  ++k.count;
  k.pages += b.pages.value;
  return true;
}

PageIndex ThreadHeap::unpark_block(PageCount pages, uint16_t cls) {
  ParkedBlocks& k = parked_;
  if (k.count == 0) return kNoPage;
  ++k.clock;
  // The newest first: its lines are the likeliest to be cached still.
  for (uint32_t i = k.count; i-- > 0;) {
    PageIndex p = k.blocks[i];
    BlockDesc& b = region_.block(p);
    if (b.pages != pages) continue;
    k.remove(i, pages.value);
    b.flags = static_cast<uint8_t>(b.flags & ~kBlockParked);
    if (b.cls != cls) {
      // As the page heap marks a run in use: every page but the first, then
      // the first, whose descriptor is the one a free reads first.
      PageDesc d{p.value, cls, PageKind::kSegregated, 0};
      for (uint32_t j = 1; j < pages.value; ++j) region_.set_page(p + PageCount{j}, d);
      region_.set_page(p, d);
    }
    return p;
  }
  // A miss: what has waited through many requests has a length the thread
  // no longer asks for, and the page heap can merge it into what it does.
  for (uint32_t i = 0; i < k.count;) {
    if (k.clock - k.parked_at[i] <= kParkedMaxAge || !release_parked(i)) ++i;
  }
  return kNoPage;
}

bool ThreadHeap::release_parked(uint32_t i) {
  ParkedBlocks& k = parked_;
  PageIndex p = k.blocks[i];
  BlockDesc& b = region_.block(p);
  if (!try_disown(b, id_)) return false;
  k.remove(i, b.pages.value);
  b.flags = static_cast<uint8_t>(b.flags & ~kBlockParked);
  source_->release(p);
  return true;
}

void ThreadHeap::release_all_parked(bool closing) {
  ParkedBlocks& k = parked_;
  if (!closing) {
    for (uint32_t i = 0; i < k.count;) {
      if (!release_parked(i)) ++i;
    }
    return;
  }
  for (uint32_t i = 0; i < k.count; ++i) {
    BlockDesc& b = region_.block(k.blocks[i]);
    b.flags = static_cast<uint8_t>(b.flags & ~kBlockParked);
    retire_block(k.blocks[i], true);
  }
  k.count = 0;
  k.pages = 0;
}

}  // namespace memd::heap
