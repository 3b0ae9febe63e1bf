#include "heap/recovery.h"

#include <algorithm>

#include <cstring>

#include "heap/block.h"
#include "heap/crash_point.h"
#include "heap/large_heap.h"
#include "heap/page_heap.h"
#include "heap/remote_free.h"

namespace memd::heap {
namespace {

bool in_use_kind(PageKind k) {
  return k == PageKind::kSegregated || k == PageKind::kLarge || k == PageKind::kHuge;
}

// The length of the block starting at `p` if its descriptors say it is one,
// else 0.
uint32_t valid_block_at(const Region& r, const SizeClasses& classes, PageIndex p, uint32_t committed) {
  PageDesc d = r.page(p);
  if (!in_use_kind(d.kind) || d.block != p.value) return 0;
  uint32_t n = r.block(p).pages.value;
  if (n == 0 || n > committed - p.value) return 0;
  if (d.kind == PageKind::kSegregated) {
    if (d.cls < classes.first_class() || d.cls > classes.last_class() ||
        n != classes.info(d.cls).block_pages) {
      return 0;
    }
  } else if (d.kind == PageKind::kLarge && n != r.header->params.large_block_pages) {
    return 0;
  }
  uint64_t want = d.pack();
  for (uint32_t i = 1; i < n; ++i) {
    if (r.page_descs[p.value + i].load(std::memory_order_relaxed) != want) return 0;
  }
  return n;
}

// Walks a free list of in-block offsets + 1 starting at `head`, keeping the
// entries that are below `bump`, object-aligned, not yet seen and carrying
// their free tag, and cutting the list at the first that is not. Returns
// the entries kept. The tag matters after a power cut, which can pair a
// new descriptor with an old data page whose stale link names an object
// live since: that object's tag was cleared when it was handed out.
uint32_t keep_good_prefix(const Region& r, char* base, uint32_t* head, uint32_t size, uint32_t bump, uint64_t* seen,
                          uint64_t* leaked) {
  uint32_t kept = 0;
  uint32_t* link = head;
  while (*link != 0) {
    uint32_t off = *link - 1;
    uint32_t idx = off / size;
    if (off >= bump || off % size != 0 || (seen[idx / 64] >> (idx % 64) & 1) ||
        tag_of(base + off) != free_tag(r.secret, r.offset_of(base + off))) {
      *link = 0;  // the rest is unreachable safely: it leaks
      ++*leaked;
      break;
    }
    seen[idx / 64] |= uint64_t{1} << (idx % 64);
    ++kept;
    link = reinterpret_cast<uint32_t*>(base + off);
  }
  return kept;
}

// Appends the objects of the list from `head` to B's free list one by one,
// as remote frees its owner took (remote_free.h, "Taking"): each is named in
// B.taken before it moves, so that a crash during recovery loses none. Stops
// at the end, at an object seen already (from there on the list was
// appended from another: the walks below overlap where a crash left one
// list's suffix on another), or at one that is not a handed-out object
// start -- or, with `need_tag`, that does not carry its free tag (a remote
// free swaps it in before its push) -- counting a leak then. Returns the
// objects appended.
uint32_t append_taken_objects(const Region& r, BlockDesc& b, char* base, uint32_t size, uint32_t head,
                              uint64_t* seen, bool need_tag, uint64_t* leaked) {
  uint32_t n = 0;
  for (; head != 0; ++n) {
    uint32_t off = head - 1;
    uint32_t idx = off / size;
    if (off < b.bump && off % size == 0 && (seen[idx / 64] >> (idx % 64) & 1)) break;
    char* p = base + off;
    uint64_t tag = free_tag(r.secret, r.offset_of(p));
    if (off >= b.bump || off % size != 0 || (need_tag && tag_of(p) != tag)) {
      ++*leaked;
      break;
    }
    seen[idx / 64] |= uint64_t{1} << (idx % 64);
    uint32_t next = link_of(p);
    remote_taken_at(b, head, next);
    link_of(p) = b.free_head;
    tag_of(p) = tag;
    b.free_head = head;
    head = next;
  }
  return n;
}

// Frees the chunks of the list from `head` that are still marked remote,
// one by one as in append_taken_objects, stopping at the first that is not
// (freed already, or not a chunk of the block). Merging is the sweep's.
void free_taken_chunks(BlockDesc& b, char* base, uint32_t bytes, uint32_t head) {
  for (uint32_t n = 0; head != 0 && n < bytes / 16; ++n) {
    if (head - 1 >= bytes - sizeof(ChunkHeader) || (head - 1) % kChunkAlign != 0) break;
    auto* c = reinterpret_cast<ChunkHeader*>(base + head - 1);  // entries are chunk offsets + 1
    if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != kChunkRemote) break;
    uint32_t next = *reinterpret_cast<uint32_t*>(c + 1);
    remote_taken_at(b, head, next);
    __atomic_store_n(&c->state, kChunkFree, __ATOMIC_RELEASE);
    head = next;
  }
}

// What no ownerless block keeps: list links, flags, a pending-stack link.
// Returns whether the block was ever laid out by a thread heap (`end` is
// written last when it is); one that was not loses its remote list too.
bool reset_ownerless(BlockDesc& b, PageKind kind) {
  b.kind = kind;
  b.flags = 0;
  b.prev = b.next = kNoPage;
  b.pending_next.store(0, std::memory_order_relaxed);
  if (b.end != 0) return true;
  b.remote.store(0, std::memory_order_relaxed);
  b.taken = 0;
  return false;
}

bool repair_segregated(const Region& r, const SizeClasses& classes, PageIndex block, uint64_t* leaked) {
  BlockDesc& b = r.block(block);
  char* base = r.page_address(block);
  const ClassInfo& info = classes.info(r.page(block).cls);
  b.cls = static_cast<uint16_t>(r.page(block).cls);
  if (!reset_ownerless(b, PageKind::kSegregated)) {
    // Handed out, never initialized: nothing was ever allocated from it.
    b.free_head = b.bump = b.used = 0;
    b.end = info.end;
    return true;
  }
  if (b.end != info.end) {
    *leaked += 1;
    b.end = info.end;
  }
  if (b.bump > b.end || b.bump % info.size != 0) {
    b.bump = b.bump > b.end ? b.end : b.bump - b.bump % info.size;
  }
  uint64_t seen[(kPageSize * 16 / kMinObject) / 64] = {};
  uint32_t free_count = keep_good_prefix(r, base, &b.free_head, info.size, b.bump, seen, leaked);
  // Remote frees a dead owner took and had not yet moved: from the taken
  // word's head, then from its tail field, where a one-by-one move goes on
  // once the head has moved (remote_free.h).
  RemoteList taken = RemoteList::unpack(b.taken);
  free_count += append_taken_objects(r, b, base, info.size, taken.head, seen, true, leaked);
  free_count += append_taken_objects(r, b, base, info.size, taken.tail, seen, true, leaked);
  // The remote list, taken as an owner takes it, appended object by object
  // (checked like the local one: its count and tail are not trusted here).
  // Every object on it carries its free tag (a remote free swaps the tag in
  // before its push), so one without names no free: after a power cut, the
  // block's descriptor may be newer than the page of an object on its list,
  // whose old bytes would send the walk on into live objects.
  uint32_t remote = RemoteList::head_of(remote_take(b));
  free_count += append_taken_objects(r, b, base, info.size, remote, seen, true, leaked);
  remote_taken_done(b);
  b.used = b.bump / info.size - free_count;
  return b.used == 0;
}

bool repair_large(const Region& r, PageIndex block, uint64_t* leaked) {
  BlockDesc& b = r.block(block);
  char* base = r.page_address(block);
  const uint32_t bytes = b.pages.value * static_cast<uint32_t>(kPageSize);
  const uint64_t secret = r.secret;
  if (!reset_ownerless(b, PageKind::kLarge)) return true;  // never laid out: nothing was allocated in it
  // Chunks a dead owner took off the remote list and had not yet released
  // (from the taken word's head, then its tail field: remote_free.h), and
  // those on the list, are free. A chunk marked remote but on neither is a
  // free by a live process caught between its claim and its push: it
  // arrives on the list later, and stays unfree until then.
  RemoteList taken = RemoteList::unpack(b.taken);
  free_taken_chunks(b, base, bytes, taken.head);
  free_taken_chunks(b, base, bytes, taken.tail);
  free_taken_chunks(b, base, bytes, RemoteList::head_of(remote_take(b)));
  remote_taken_done(b);
  // Only headers of chunks that hold memory (live, sampled, or claimed by
  // a remote free) are trusted, each for its own length; the memory between
  // them is free, whatever free or broken headers it holds. A free header
  // is not trusted for its length: after a power cut it can be older than
  // the chunks after it (a split written back half, the front's new length
  // on the medium and the rest's header not), and following it would skip
  // them. A chunk that holds memory is never inside another that does, in
  // any state the block was in (a chunk is freed before it is merged), so a
  // scan that stops at the first such header never lands inside one.
  auto holds = [&](uint32_t at) {
    const auto* c = reinterpret_cast<const ChunkHeader*>(base + at);
    uint32_t state = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
    return (chunk_state_is_live(state) || state == kChunkRemote) && c->size >= 2 * sizeof(ChunkHeader) &&
           c->size % kChunkAlign == 0 && c->size <= bytes - at &&
           c->check == static_cast<uint32_t>(secret ^ r.offset_of(c));
  };
  const uint32_t min_chunk = 2 * sizeof(ChunkHeader);
  uint32_t off = 0;
  ChunkHeader* last_held = nullptr;
  while (off < bytes) {
    auto* c = reinterpret_cast<ChunkHeader*>(base + off);
    if (holds(off)) {
      // As it is: a sampled chunk keeps its mark, so that whoever frees it
      // counts it as it was counted when allocated.
      last_held = c;
      off += c->size;
      continue;
    }
    uint32_t state = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
    bool free_header = chunk_state_is_free(state) && c->check == static_cast<uint32_t>(secret ^ r.offset_of(c));
    // Something was there that no free header accounts for: a chunk lost
    // to the crash, as far as anyone can tell.
    if (!free_header && (off != 0 || last_held != nullptr)) ++*leaked;
    // The gap needs room for a header of its own, unless a chunk before it
    // can take it (a gap between chunks of two different moments of the
    // block, which a power cut can leave, may be a single granule).
    uint32_t next = off + (last_held != nullptr ? kChunkAlign : min_chunk);
    while (next + sizeof(ChunkHeader) <= bytes && !holds(next)) next += kChunkAlign;
    if (next + sizeof(ChunkHeader) > bytes) next = bytes;
    if (next - off < min_chunk && last_held != nullptr) {
      last_held->size += next - off;
    } else {
      c->size = next - off;
      c->check = static_cast<uint32_t>(secret ^ r.offset_of(c));
      __atomic_store_n(&c->state, kChunkFree, __ATOMIC_RELEASE);
    }
    off = next;
  }
  const bool any_live = last_held != nullptr;
  // Every chunk's prev_size, from the lengths just settled.
  uint32_t prev_size = 0;
  for (off = 0; off < bytes;) {
    auto* c = reinterpret_cast<ChunkHeader*>(base + off);
    c->prev_size = prev_size;
    prev_size = c->size;
    off += c->size;
  }
  return !any_live;
}

void close_owner_slot(const Region& r, uint32_t slot) {
  OwnerSlot& s = r.slots[slot];
  uint64_t gen = s.pending.load(std::memory_order_relaxed) >> 32;
  s.pending.store(gen << 32 | kPendingClosed, std::memory_order_release);
  s.in_use.store(0, std::memory_order_release);
}

}  // namespace

bool block_repair(const Region& r, const SizeClasses& classes, PageIndex block, uint64_t* leaked) {
  return r.page(block).kind == PageKind::kLarge ? repair_large(r, block, leaked)
                                                 : repair_segregated(r, classes, block, leaked);
}

namespace recovery_detail {

void recover(const Region& r, const SizeClasses& classes, MemorySource& source, KeepFn keep, void* ctx,
             RecoveryReport* report, const uint8_t* live_leases) {
  *report = {};
  RegionHeader& h = *r.header;
  // Holder tags of live leases are lease slot + 1 (layout.h).
  auto live_holder = [&](uint32_t holder) {
    return live_leases != nullptr && holder >= 1 && holder <= r.max_clients && live_leases[holder - 1] != 0;
  };
  for (uint32_t slot = 0; slot < r.max_owners; ++slot) {
    if (!live_holder(r.slots[slot].in_use.load(std::memory_order_acquire))) close_owner_slot(r, slot);
  }
  for (uint32_t i = 0; i < r.max_clients; ++i) {
    if (live_leases == nullptr || live_leases[i] == 0) {
      r.leases[i].blocks.store(0, std::memory_order_relaxed);  // what it held is taken back below
      r.leases[i].state.store(LeaseState::kFree, std::memory_order_release);
    }
  }
  // A block (or a huge run a thread caches) owned through a live holder's
  // slot belongs to a running process: hands off.
  auto owned_by_live = [&](uint32_t word) {
    OwnerId owner = word >> 1;
    if (owner == kNoOwner) return false;
    uint32_t slot = slot_of(owner);
    return slot < r.max_owners && live_holder(r.slots[slot].in_use.load(std::memory_order_acquire));
  };
  h.next_owner_hint.store(0, std::memory_order_relaxed);
  h.abandoned_frees.store(0, std::memory_order_relaxed);

  uint32_t committed = r.committed_pages();
  crash_point("recovery.slots");  // slots closed, the page heap not yet rebuilt
  page_heap_reset(r);
  uint32_t gap_start = UINT32_MAX;
  auto close_gap = [&](uint32_t end) {
    if (gap_start == UINT32_MAX) return;
    PageCount n{end - gap_start};
    // Their contents are stale, and on a shared object possibly holes:
    // discard them, so that reuse allocates backing again.
    source.discard(data_offset_of(r, PageIndex{gap_start}), n.bytes());
    page_heap_add_free(r, PageIndex{gap_start}, n, kRunDiscarded);
    ++report->free_runs;
    gap_start = UINT32_MAX;
  };
  for (uint32_t p = 0; p < committed;) {
    uint32_t n = valid_block_at(r, classes, PageIndex{p}, committed);
    if (n == 0) {
      if (gap_start == UINT32_MAX) gap_start = p;
      ++p;
      continue;
    }
    close_gap(p);
    page_heap_count_in_use(r, PageCount{n});
    p += n;
  }
  close_gap(committed);

  // Every block is ownerless now; repair each, free the empty ones.
  for (uint32_t p = 0; p < committed;) {
    PageIndex at{p};
    PageDesc d = r.page(at);
    uint32_t n = r.block(at).pages.value;
    if (!in_use_kind(d.kind) || d.block != p || n == 0 || n > committed - p) {
      p += d.kind == PageKind::kFree && d.block == p && n != 0 && n <= committed - p ? n : 1;
      continue;
    }
    BlockDesc& b = r.block(at);
    if (owned_by_live(b.owner_word.load(std::memory_order_acquire))) {
      ++report->blocks_kept;
      p += n;
      continue;
    }
    crash_point("recovery.repair");  // some blocks repaired, others not
    uint32_t word = b.owner_word.exchange(0, std::memory_order_acq_rel);
    bool empty;
    if (d.kind == PageKind::kHuge) {
      empty = word != 0;  // claimed by a free (or a cache): not live
      if (!empty) ++report->huge_live;
    } else {
      empty = block_repair(r, classes, at, &report->leaked_objects);
    }
    if (empty) {
      page_heap_free(r, at, PageCount{n}, 0);
      ++report->blocks_released;
    } else if (d.kind != PageKind::kHuge) {
      ++report->blocks_live;
      keep(ctx, at);
    }
    p += n;
  }
}

uint32_t reclaim(const Region& r, const SizeClasses& classes, uint32_t holder, uint32_t now_ms,
                 KeepFn keep, void* ctx, uint64_t* leaked) {
  // Slots of the dead holder: close them first, so that no notification is
  // pushed to them any more.
  uint64_t dead[kMaxOwnerSlots / 64] = {};
  // The header is in memory clients write: its count bounds nothing here
  // beyond the table this array covers.
  const uint32_t owners = std::min<uint32_t>(r.max_owners, kMaxOwnerSlots);
  bool any = false;
  for (uint32_t slot = 0; slot < owners; ++slot) {
    if (r.slots[slot].in_use.load(std::memory_order_acquire) != holder) continue;
    dead[slot / 64] |= uint64_t{1} << (slot % 64);
    any = true;
  }
  if (!any) return 0;
  for (uint32_t slot = 0; slot < owners; ++slot) {
    if (dead[slot / 64] >> (slot % 64) & 1) {
      OwnerSlot& s = r.slots[slot];
      uint64_t gen = s.pending.load(std::memory_order_relaxed) >> 32;
      s.pending.store(gen << 32 | kPendingClosed, std::memory_order_release);
    }
  }
  uint32_t taken = 0;
  // Lengths and kinds are read from memory the client could write: a block
  // is taken at the length its descriptors agree on (valid_block_at), and
  // anything else is stepped over a page at a time.
  uint32_t committed = r.committed_pages();
  for (uint32_t p = 0; p < committed;) {
    PageIndex at{p};
    PageDesc d = r.page(at);
    BlockDesc& b = r.block(at);
    uint32_t n = valid_block_at(r, classes, at, committed);
    if (n == 0) {
      uint32_t run = b.pages.value;
      p += d.kind == PageKind::kFree && d.block == p && run != 0 && run <= committed - p ? run : 1;
      continue;
    }
    uint32_t word = b.owner_word.load(std::memory_order_acquire);
    OwnerId owner = owner_of(word);
    bool ours = owner != kNoOwner && slot_of(owner) < owners &&
                (dead[slot_of(owner) / 64] >> (slot_of(owner) % 64) & 1);
    if (ours && b.owner_word.compare_exchange_strong(word, 0, std::memory_order_acq_rel)) {
      ++taken;
      // What the block is, its page descriptors say (checked above); the
      // block descriptor's copy was the client's to write. Written only
      // where they differ: others read them without a lock.
      if (b.kind != d.kind) b.kind = d.kind;
      if (b.cls != d.cls) b.cls = d.cls;
      if (b.pages.value != n) b.pages = PageCount{n};
      set_descriptors_durable(b, false);
      bool empty = d.kind == PageKind::kHuge || block_repair(r, classes, at, leaked);
      if (empty) page_heap_free(r, at, PageCount{n}, now_ms);
      else keep(ctx, at);
    }
    p += n;
  }
  for (uint32_t slot = 0; slot < owners; ++slot) {
    if (dead[slot / 64] >> (slot % 64) & 1) r.slots[slot].in_use.store(0, std::memory_order_release);
  }
  return taken;
}

}  // namespace recovery_detail
}  // namespace memd::heap
