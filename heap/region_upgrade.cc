#include "heap/region_upgrade.h"

#include <algorithm>

#include "heap/large_heap.h"

namespace memd::heap {
namespace {

// Version 2 kept a block's remote list as a 32-bit head (in-block offset + 1,
// 0: empty) at byte 48, where version 3 keeps pending_next; its bytes 56..63
// held pending_next and padding that nothing ever wrote, where version 3
// keeps the remote word. owner_word (byte 52) did not move.
static_assert(offsetof(BlockDesc, pending_next) == 48 && offsetof(BlockDesc, remote) == 56);

// Walks a version-2 remote list of the block at `block` (`pages` long, of
// `kind`) and returns it as a version-3 word. A link that leaves the block
// or misses an 8-byte granule cuts the list there; a list longer than the
// block can hold cycles and is dropped whole.
uint64_t reencode_v2_list(const Region& r, PageIndex block, PageKind kind, uint32_t pages, uint32_t head,
                          uint64_t* leaked) {
  char* base = r.page_address(block);
  const uint64_t bytes = uint64_t{pages} * kPageSize;
  // Objects of a segregated block link through their first 4 bytes; large
  // chunks through their payload's, after the chunk header.
  const uint64_t link_at = kind == PageKind::kLarge ? sizeof(ChunkHeader) : 0;
  const uint32_t limit = static_cast<uint32_t>(bytes / 16 + 1);
  uint32_t n = 0, tail = 0;
  uint32_t* link = &head;
  while (*link != 0) {
    uint64_t off = *link - 1;
    if (off % 8 != 0 || off + link_at + sizeof(uint32_t) > bytes) {
      *link = 0;  // the rest leaks
      ++*leaked;
      break;
    }
    if (++n > limit) {
      ++*leaked;
      return 0;
    }
    tail = *link;
    link = reinterpret_cast<uint32_t*>(base + off + link_at);
  }
  return head == 0 ? 0 : RemoteList{head, tail, n}.pack();
}

void upgrade_v2_descriptors(const Region& r, uint64_t* leaked) {
  const uint32_t committed = r.committed_pages();
  for (uint32_t i = 0; i < committed; ++i) {
    BlockDesc& b = r.blocks[i];
    uint64_t word = b.remote.load(std::memory_order_relaxed);
    if (word >> 32 != 0) {
      // Converted before a crash: a version-3 list (its count is not 0),
      // whose pending_next may still hold the old head.
      b.pending_next.store(0, std::memory_order_relaxed);
      continue;
    }
    uint32_t old_head = b.pending_next.load(std::memory_order_relaxed);
    PageDesc d = r.page(PageIndex{i});
    bool listed = d.block == i && (d.kind == PageKind::kSegregated || d.kind == PageKind::kLarge) &&
                  b.pages.value >= 1 && b.pages.value <= kMaxBlockPages && b.pages.value <= committed - i;
    uint64_t next =
        listed && old_head != 0 ? reencode_v2_list(r, PageIndex{i}, d.kind, b.pages.value, old_head, leaked) : 0;
    // Only what changes is written: descriptors past those ever used may
    // have no backing yet.
    if (next != word) b.remote.store(next, std::memory_order_relaxed);
    if (old_head != 0) b.pending_next.store(0, std::memory_order_relaxed);
  }
}

// Version 3 kept nothing in an in-use block's bytes 32..39 (the LRU links
// it had as a free run, stale), where version 4 keeps its taken word:
// cleared, so that recovery never walks a stale link as a list.
void upgrade_v3_descriptors(const Region& r) {
  const uint32_t committed = r.committed_pages();
  for (uint32_t i = 0; i < committed; ++i) {
    BlockDesc& b = r.blocks[i];
    PageDesc d = r.page(PageIndex{i});
    bool in_use = d.block == i && (d.kind == PageKind::kSegregated || d.kind == PageKind::kLarge ||
                                   d.kind == PageKind::kHuge);
    if (in_use && b.taken != 0) b.taken = 0;
  }
}

}  // namespace

bool region_upgrade(const Region& r, MemorySource& source, uint64_t* leaked) {
  RegionHeader& h = *r.header;
  if (h.version < kOldestUpgradableVersion || h.version > kFormatVersion) return false;
  if (h.version == kFormatVersion) return true;
  if (h.version < 3) upgrade_v2_descriptors(r, leaked);
  upgrade_v3_descriptors(r);
  // The descriptors are durable before the header says they are new.
  uint32_t committed = r.committed_pages();
  size_t first = static_cast<size_t>(h.block_desc_offset) & ~(kPageSize - 1);
  size_t end = static_cast<size_t>(h.block_desc_offset + uint64_t{committed} * sizeof(BlockDesc));
  if (end > first) source.persist(first, (end - first + kPageSize - 1) & ~(kPageSize - 1));
  std::atomic_thread_fence(std::memory_order_release);
  h.version = kFormatVersion;
  source.persist(0, kPageSize);
  return true;
}

}  // namespace memd::heap
