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

PageIndex ThreadHeap::unpark_block(PageCount pages, uint16_t cls, bool* intact) {
  ParkedBlocks& k = parked_;
  *intact = false;
  if (k.count == 0) return kNoPage;
  ++k.clock;
  // A block of the class itself first, whose free list is whole: it needs
  // no formatting, and its objects come from the inline path. Else the
  // newest of the length: its lines are the likeliest to be cached still.
  uint32_t pick = k.count;
  for (uint32_t i = k.count; i-- > 0;) {
    const BlockDesc& b = region_.block(k.blocks[i]);
    if (b.pages != pages) continue;
    if (pick == k.count) pick = i;
    if (b.cls == cls && reusable_unformatted(b)) {
      pick = i;
      *intact = true;
      break;
    }
  }
  if (pick != k.count) {
    PageIndex p = k.blocks[pick];
    BlockDesc& b = region_.block(p);
    k.remove(pick, pages.value);
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

bool ThreadHeap::reusable_unformatted(const BlockDesc& b) const {
  // Every object it ever handed out came back to its own free list (used
  // 0), none waits on the remote list or half taken off it, and no
  // notification is in flight: the list and the bump bound describe the
  // block as block_init would leave it, but for the objects' order.
  return b.used == 0 && b.remote.load(std::memory_order_relaxed) == 0 && b.taken == 0 &&
         b.owner_word.load(std::memory_order_acquire) == (id_ << 1);
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
