// Allocation inside one segregated block, after Vam's reaps: bump a pointer to
// the end of the block, then reuse the block's own free list. Objects carry no
// header; the block's class comes from the page descriptor.
//
// A free object holds, in its first 4 bytes, the in-block offset + 1 of the
// next free object, and in bytes 8..15 a tag (region secret ^ offset). A free
// that finds the tag already there is a double free. Allocation clears the tag
// word, so a live object never carries one unless its owner writes that exact
// value.
#pragma once

#include <cstdint>
#include <cstring>

#include "heap/layout.h"

namespace memd::heap {

inline uint64_t free_tag(uint64_t secret, Offset off) { return secret ^ off; }

inline uint32_t& link_of(char* p) { return *reinterpret_cast<uint32_t*>(p); }
inline uint64_t& tag_of(char* p) { return *reinterpret_cast<uint64_t*>(p + 8); }

// Takes an object from B, or nullptr if B has no room. Owner only.
inline char* block_pop(BlockDesc& b, char* base, uint32_t size) {
  uint32_t head = b.free_head;
  if (__builtin_expect(head != 0, 1)) {
    char* p = base + head - 1;
    b.free_head = link_of(p);
    tag_of(p) = 0;
    ++b.used;
    return p;
  }
  if (b.bump < b.end) {
    char* p = base + b.bump;
    b.bump += size;
    tag_of(p) = 0;
    ++b.used;
    return p;
  }
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

// Moves B's remote list onto its local free list. Owner only. Returns the
// number of objects moved, or UINT32_MAX if the list is corrupt (a racing
// double free made it cycle); the list is then dropped, leaking its objects.
uint32_t block_collect_remote(BlockDesc& b, char* base);

// Whether object `p` of B (in-block offset `in_block`) is on a free list or
// past the bump pointer. Owner only; walks the lists (debug and query paths).
bool block_object_is_free(const BlockDesc& b, const char* base, uint32_t in_block);

// Puts a block into its initial state for class objects of `size`.
void block_init(BlockDesc& b, uint16_t cls, uint32_t end, bool zeroed);

}  // namespace memd::heap
