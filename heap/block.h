// Allocation inside one segregated block, after Vam's reaps: bump a pointer to
// the end of the block, then reuse the block's own free list. Objects carry no
// header; the block's class comes from the page descriptor.
//
// A free object holds, in its first 4 bytes, the in-block offset + 1 of the
// next free object, and in bytes 8..15 a tag (region secret ^ offset). A free
// that finds the tag already there is a double free. Allocation clears the tag
// word, so a live object never carries one unless its owner writes that exact
// value. A non-owner's free swaps the tag in atomically (block_free_remote):
// two frees of one object racing on two threads never both push it.
#pragma once

#include <cstdint>
#include <cstring>

#include "heap/layout.h"
#include "heap/remote_free.h"

namespace memd::heap {

inline uint64_t free_tag(uint64_t secret, Offset off) { return secret ^ off; }

inline uint32_t& link_of(char* p) { return *reinterpret_cast<uint32_t*>(p); }
inline uint64_t& tag_of(char* p) { return *reinterpret_cast<uint64_t*>(p + 8); }
// The tag as a free about to claim the object reads it: another thread may be
// swapping it in at this very moment (a racing double free).
inline uint64_t load_tag(char* p) { return __atomic_load_n(&tag_of(p), __ATOMIC_RELAXED); }

// Takes object `p` out of B's free list, `link` being the word that names
// it (b.free_head, or the link of the object before it). Owner only.
inline char* block_unlink_free(BlockDesc& b, uint32_t* link, char* p) {
  *link = link_of(p);
  tag_of(p) = 0;
  ++b.used;
  return p;
}

// Takes the first object of B's free list, whose head the caller read.
// REQUIRES: head == b.free_head != 0. Owner only.
inline char* block_pop_free(BlockDesc& b, char* base, uint32_t head) {
  return block_unlink_free(b, &b.free_head, base + head - 1);
}

// Takes the next never-used object of B. REQUIRES: b.bump < b.end. Owner only.
inline char* block_pop_bump(BlockDesc& b, char* base, uint32_t size) {
  char* p = base + b.bump;
  b.bump += size;
  tag_of(p) = 0;
  ++b.used;
  return p;
}

// Takes an object from B, or nullptr if B has no room. Owner only.
inline char* block_pop(BlockDesc& b, char* base, uint32_t size) {
  uint32_t head = b.free_head;
  if (__builtin_expect(head != 0, 1)) return block_pop_free(b, base, head);
  if (b.bump < b.end) return block_pop_bump(b, base, size);
  return nullptr;
}

// Returns object `p` (in-block offset `in_block`) to B's local free list.
// Owner only. Returns the new count of objects in use.
inline uint32_t block_push_local(BlockDesc& b, char* p, uint32_t in_block, uint64_t tag) {
  link_of(p) = b.free_head;
  tag_of(p) = tag;
  b.free_head = in_block + 1;
  return --b.used;
}

enum class RemoteFree : uint8_t {
  kPushed,       // on B's remote list
  kPushedFirst,  // on B's remote list, which was empty: tell the owner (notify_owner)
  kAlreadyFree,  // p carried its free tag: a double free; nothing changed
};

// A free of object `p` (in-block offset `in_block`) of B by a thread that
// does not own B. Claims p by swapping its free tag in: of two frees of one
// object racing past their tag checks, exactly one finds the tag missing and
// pushes; the other changes nothing. So no race of non-owners can put one
// object on the remote list twice (a cycle the owner could not see without
// walking the list).
//
// block_claim_remote is the claim alone: false if p carried its free tag
// already. ThreadHeap::free_remote claims, then gathers objects of one block
// into one push (remote_push_chain).
inline bool block_claim_remote(char* p, uint64_t tag) {
  return __atomic_exchange_n(&tag_of(p), tag, __ATOMIC_RELAXED) != tag;
}
inline RemoteFree block_free_remote(BlockDesc& b, char* p, uint32_t in_block, uint64_t tag) {
  if (!block_claim_remote(p, tag)) return RemoteFree::kAlreadyFree;
  return remote_push(b, p, in_block) ? RemoteFree::kPushedFirst : RemoteFree::kPushed;
}

// Moves B's remote list onto its local free list. Owner only (or the
// page-heap owner, for a block nobody owns). Returns the number of objects
// moved, or UINT32_MAX if the list is corrupt; the list is then dropped,
// leaking its objects, rather than hand one out twice.
//
// The exchange that takes the list yields its head, tail and count; once
// every object of B has been handed out (bump at end, as in a block that ran
// out, the usual case) that is all collection needs: the list goes in front
// of the local one, touching at most its tail object. Otherwise, or when the
// word does not add up (a count above `used`, a head or tail outside the
// block), the list is walked and checked object by object: objects past the
// bump pointer were never handed out and are dropped, and a list longer than
// the block can hold (a cycle) is dropped whole.
uint32_t block_collect_remote(BlockDesc& b, char* base);

// Whether object `p` of B (in-block offset `in_block`) is on a free list or
// past the bump pointer. Owner only; walks the lists (debug and query paths).
bool block_object_is_free(const BlockDesc& b, const char* base, uint32_t in_block);

// Puts a block into its initial state for class objects of `size`.
void block_init(BlockDesc& b, uint16_t cls, uint32_t end, bool zeroed);

}  // namespace memd::heap
