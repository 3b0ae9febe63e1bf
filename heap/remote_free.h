// Frees from a thread that does not own the block, and how the owner learns of
// them. Lock-free; works across processes because everything it touches lives
// in the region.
//
//   remote free of p in block B (any thread, any process):
//     push p on B.remote (CAS of head, tail and count: layout.h RemoteList)
//     if the list was empty: notify(B)
//   notify(B):
//     w = B.owner_word; if notified or no owner: done (someone else will tell,
//     or the next adopter collects)
//     CAS set the notified bit, then push B on the owner's pending stack; if
//     the owner's slot has closed or changed generation, take the bit back.
//   owner, on its slow paths: take the whole pending stack, clear each block's
//     notified bit, then collect its remote list (one compare-and-swap that
//     empties it, the list named in B.taken until its objects are moved:
//     "Taking" below).
//
// Invariant: B's notified bit is set iff B sits in exactly one pending stack
// or one thread is about to push it there. So B.pending_next is never shared.
// Changing owner (abandon, adopt) stores a new owner word with the bit clear;
// the abandoning owner has closed its stack first, and the adopter collects the
// remote list after the store, so no remote free is missed.
#pragma once

#include <atomic>
#include <cstdint>

#include "heap/layout.h"

namespace memd::heap {

inline OwnerId owner_of(uint32_t word) { return word >> 1; }
inline uint32_t slot_of(OwnerId id) { return id & (kMaxOwnerSlots - 1); }
inline uint32_t generation_of(OwnerId id) { return id >> kOwnerSlotBits; }

// Pushes a chain of `count` objects of B on B's remote list, counting them:
// `head` and `tail` are in-block offsets + 1 of its first and last object,
// each object's first 4 bytes link to the next (in-block offset + 1), and
// `tail_obj` is the last object, whose link the push sets. Returns true if
// the list was empty before (tell the owner: notify_owner). The first object
// pushed on an empty list is its tail until the owner takes the list.
// REQUIRES: every offset a multiple of 8, at most RemoteList::kMaxOffset.
// This is the bare push: a free claims each object first (block_free_remote,
// ThreadHeap::free_remote, LargeHeap::claim_remote), so that of two racing
// frees only one pushes.
inline bool remote_push_chain(BlockDesc& b, char* tail_obj, uint32_t head, uint32_t tail, uint32_t count) {
  const uint64_t head_field = RemoteList::field(head);
  const uint64_t added = uint64_t{count} << RemoteList::kCountShift;
  uint64_t w = b.remote.load(std::memory_order_relaxed);
  uint64_t next;
  do {
    uint64_t old_head = w & RemoteList::kLinkMask;
    *reinterpret_cast<uint32_t*>(tail_obj) = RemoteList::link(old_head);
    // Onto an empty list: the chain's tail is the list's, and the count
    // starts at the chain's (whatever a corrupt word held besides a zero
    // head is dropped).
    next = old_head == 0 ? head_field | RemoteList::field(tail) << RemoteList::kLinkBits | added
                         : ((w & ~RemoteList::kLinkMask) + added) | head_field;
  } while (!b.remote.compare_exchange_weak(w, next, std::memory_order_seq_cst, std::memory_order_relaxed));
  return (w & RemoteList::kLinkMask) == 0;
}

// Pushes the one object `p` (in-block offset `in_block`) on B's remote list.
inline bool remote_push(BlockDesc& b, char* p, uint32_t in_block) {
  return remote_push_chain(b, p, in_block + 1, in_block + 1, 1);
}

// Taking. A remote list is taken in two steps: the compare-and-swap that
// empties B.remote, and the moves of its entries onto B's free list (a large
// block's: the release of each chunk). A process killed between them would
// lose every entry it took, so the taker names what it holds in B.taken
// (layout.h) all along:
//
//   remote_take(B)        B.taken = the list word, then the CAS that empties
//                         B.remote (retried, naming the new word, if a push
//                         came in between)
//   moving one by one:    remote_taken_at(B, e, next) before e moves, so that
//                         once e has moved recovery goes on from `next`
//   remote_taken_done(B)  B.taken = 0, once every entry is where it belongs
//
// Recovery (recovery.cc) walks B.taken from its head, then from its tail
// field (where a one-by-one move went on once the head had moved), taking
// the entries that are still remote frees (a segregated object on no list,
// with its free tag; a chunk marked kChunkRemote). Only compiler order matters (a killed process's stores all reach memory),
// hence signal fences: the taken word is written before the entries move and
// cleared after, never between two moves the compiler exchanged.
inline void remote_taken_set(BlockDesc& b, uint64_t word) {
  std::atomic_signal_fence(std::memory_order_seq_cst);
  __atomic_store_n(&b.taken, word, __ATOMIC_RELAXED);
  std::atomic_signal_fence(std::memory_order_seq_cst);
}
inline uint64_t remote_take(BlockDesc& b) {
  uint64_t w = b.remote.load(std::memory_order_acquire);
  while (w != 0) {
    remote_taken_set(b, w);
    if (b.remote.compare_exchange_weak(w, 0, std::memory_order_seq_cst, std::memory_order_acquire)) return w;
  }
  return 0;
}
// `entry` (in-block offset + 1) is about to move; `next` is the entry after it.
inline void remote_taken_at(BlockDesc& b, uint32_t entry, uint32_t next) {
  remote_taken_set(b, RemoteList{entry, next, 1}.pack());
}
inline void remote_taken_done(BlockDesc& b) { remote_taken_set(b, 0); }

// Tells B's owner that B has remote frees waiting.
void notify_owner(const Region& r, PageIndex block);

// Owner side: opens slot `slot` for generation `gen` (a fresh thread heap).
void pending_open(const Region& r, OwnerId id);

// Owner side: whether anything waits on the stack (one relaxed load).
inline bool pending_nonempty(const OwnerSlot* slot) {
  uint32_t head = static_cast<uint32_t>(slot->pending.load(std::memory_order_relaxed));
  return head != 0 && head != kPendingClosed;
}

// Owner side: takes every block pushed since the last call. Returns the first
// block page + 1 (0: none). Walk the list with pending_settle.
uint32_t pending_take(const Region& r, OwnerId id);

// Owner side: steps through a taken list. Sets *next to the following entry
// (page + 1, 0: end) and, if `block` is still ours, clears its notified bit
// and returns true; a stale entry (the block changed owner, which cleared the
// bit then) returns false and needs nothing.
bool pending_settle(const Region& r, OwnerId id, PageIndex block, uint32_t* next);

// Owner side, at exit: closes the stack and returns what was in it (as
// pending_take). Later notifications for `id` fail and are dropped.
uint32_t pending_close(const Region& r, OwnerId id);

// Sets B's owner (kNoOwner to abandon). Clears the notified bit.
inline void set_owner(BlockDesc& b, OwnerId id) {
  b.owner_word.store(id << 1, std::memory_order_seq_cst);
}

}  // namespace memd::heap

namespace memd::heap {

// Owner side: gives up ownership of B (to release or abandon it) if no
// notification for B is pending or in flight. Returns false otherwise; the
// caller retries after taking its pending stack.
inline bool try_disown(BlockDesc& b, OwnerId id) {
  uint32_t expected = id << 1;
  return b.owner_word.compare_exchange_strong(expected, 0, std::memory_order_seq_cst);
}

}  // namespace memd::heap
