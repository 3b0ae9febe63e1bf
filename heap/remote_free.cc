#include "heap/remote_free.h"

namespace memd::heap {
namespace {

uint64_t pending_word(uint32_t gen, uint32_t head) { return uint64_t{gen} << 32 | head; }

// Pushes B on owner `id`'s stack. False if the slot is closed or belongs to
// another generation of thread.
bool pending_push(const Region& r, OwnerId id, PageIndex block) {
  OwnerSlot& slot = r.slots[slot_of(id)];
  uint32_t gen = generation_of(id);
  uint64_t w = slot.pending.load(std::memory_order_acquire);
  BlockDesc& b = r.block(block);
  for (;;) {
    uint32_t head = static_cast<uint32_t>(w);
    if (w >> 32 != gen || head == kPendingClosed) return false;
    b.pending_next.store(head, std::memory_order_relaxed);
    if (slot.pending.compare_exchange_weak(w, pending_word(gen, block.value + 1),
                                           std::memory_order_seq_cst, std::memory_order_acquire)) {
      return true;
    }
  }
}

}  // namespace

void notify_owner(const Region& r, PageIndex block) {
  BlockDesc& b = r.block(block);
  uint32_t w = b.owner_word.load(std::memory_order_seq_cst);
  for (;;) {
    if (owner_of(w) == kNoOwner) {
      // Abandoned: whoever holds the page heap sweeps such blocks.
      r.header->abandoned_frees.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (w & 1) return;
    if (b.owner_word.compare_exchange_weak(w, w | 1, std::memory_order_seq_cst)) break;
  }
  if (pending_push(r, owner_of(w), block)) return;
  // The owner is leaving (its stack is closed): hand the token back, unless
  // the owner word has already changed, which cleared it.
  uint32_t expected = w | 1;
  b.owner_word.compare_exchange_strong(expected, w, std::memory_order_seq_cst);
}

void pending_open(const Region& r, OwnerId id) {
  r.slots[slot_of(id)].pending.store(pending_word(generation_of(id), 0), std::memory_order_seq_cst);
}

uint32_t pending_take(const Region& r, OwnerId id) {
  OwnerSlot& slot = r.slots[slot_of(id)];
  uint64_t w = slot.pending.load(std::memory_order_relaxed);
  if (static_cast<uint32_t>(w) == 0) return 0;
  w = slot.pending.exchange(pending_word(generation_of(id), 0), std::memory_order_seq_cst);
  return static_cast<uint32_t>(w);
}

bool pending_settle(const Region& r, OwnerId id, PageIndex block, uint32_t* next) {
  BlockDesc& b = r.block(block);
  // Read the link first: once the bit is clear, a notifier may push the block
  // again and rewrite it.
  *next = b.pending_next.load(std::memory_order_relaxed);
  if (owner_of(b.owner_word.load(std::memory_order_seq_cst)) != id) return false;
  b.owner_word.fetch_and(~1u, std::memory_order_seq_cst);
  return true;
}

uint32_t pending_close(const Region& r, OwnerId id) {
  OwnerSlot& slot = r.slots[slot_of(id)];
  uint64_t w = slot.pending.exchange(pending_word(generation_of(id), kPendingClosed),
                                     std::memory_order_seq_cst);
  uint32_t head = static_cast<uint32_t>(w);
  return head == kPendingClosed ? 0 : head;
}

}  // namespace memd::heap
