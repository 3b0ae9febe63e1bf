#include "heap/inspect.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "heap/block.h"
#include "heap/large_heap.h"
#include "heap/remote_free.h"

namespace memd::heap {
namespace {

uint32_t chunk_state(const ChunkHeader* c) { return __atomic_load_n(&c->state, __ATOMIC_ACQUIRE); }

// Counts of one segregated block: objects handed out, locally free, remote.
struct SegregatedCounts {
  uint32_t handed_out = 0, local_free = 0, remote_free = 0;
};

// Walks a free list of a segregated block, marking each object in `seen`.
// Returns the length, or -1 with `why` set if the list leaves the block,
// misses an object boundary, passes the bump pointer or repeats. *last (if
// given) gets the last entry (in-block offset + 1, 0: empty list).
int walk_free_list(uint32_t head, const char* base, const BlockDesc& b, uint32_t size,
                   uint64_t* seen, const char** why, uint32_t* last = nullptr) {
  int n = 0;
  if (last != nullptr) *last = 0;
  for (uint32_t h = head; h != 0; h = *reinterpret_cast<const uint32_t*>(base + h - 1)) {
    if (last != nullptr) *last = h;
    uint32_t off = h - 1;
    if (off >= b.bump || off % size != 0) {
      *why = "free list points outside the allocated part of the block";
      return -1;
    }
    uint32_t idx = off / size;
    if (seen[idx / 64] & (uint64_t{1} << (idx % 64))) {
      *why = "object on a free list twice";
      return -1;
    }
    seen[idx / 64] |= uint64_t{1} << (idx % 64);
    ++n;
  }
  return n;
}

bool check_segregated(const Region& r, const SizeClasses& classes, PageIndex p, const BlockDesc& b,
                      SegregatedCounts* out, const char** why) {
  // The descriptor is written by the block's owner, in another process: its
  // class indexes a table here only once it is known to be one.
  if (b.cls < classes.first_class() || b.cls > classes.last_class()) {
    *why = "block class out of range";
    return false;
  }
  const ClassInfo& c = classes.info(b.cls);
  // A block leased but not yet initialized by a thread heap (a client's
  // spare): no object was ever handed out.
  uint64_t remote_word = b.remote.load(std::memory_order_acquire);
  if (b.end == 0 && b.bump == 0 && b.used == 0 && b.free_head == 0 && remote_word == 0) {
    *out = {};
    return true;
  }
  if (b.end != c.end || b.bump > b.end || b.bump % c.size != 0) {
    *why = "bump pointer or end out of range for the class";
    return false;
  }
  uint64_t seen[kPageSize * 16 / kMinObject / 64] = {};
  if (c.end / c.size > sizeof(seen) * 8) {
    *why = "block too large to check";
    return false;
  }
  const char* base = r.page_address(p);
  int local = walk_free_list(b.free_head, base, b, c.size, seen, why);
  if (local < 0) return false;
  RemoteList rl = RemoteList::unpack(remote_word);
  uint32_t remote_tail = 0;
  int remote = walk_free_list(rl.head, base, b, c.size, seen, why, &remote_tail);
  if (remote < 0) return false;
  // The owner takes the list whole on the word's say: it must tell the truth.
  if (rl.count != static_cast<uint32_t>(remote) || rl.tail != remote_tail) {
    *why = "remote list's count or tail disagrees with its objects";
    return false;
  }
  out->handed_out = b.bump / c.size;
  out->local_free = static_cast<uint32_t>(local);
  out->remote_free = static_cast<uint32_t>(remote);
  if (b.used != out->handed_out - out->local_free) {
    *why = "count of objects in use disagrees with the free list";
    return false;
  }
  return true;
}

bool check_large(const Region& r, PageIndex p, const BlockDesc& b, RegionStats* s, const char** why) {
  const char* base = r.page_address(p);
  // Its length as the page heap made it, not as its descriptor (which the
  // owner, in another process, can write) says.
  uint32_t bytes = r.header->params.large_block_pages * static_cast<uint32_t>(kPageSize);
  // Leased but not laid out yet (a client's spare): no chunk to walk.
  if (__atomic_load_n(&b.end, __ATOMIC_ACQUIRE) == 0) return true;
  uint32_t off = 0, prev_size = 0;
  bool prev_free = false;
  while (off < bytes) {
    auto* c = reinterpret_cast<const ChunkHeader*>(base + off);
    uint32_t state = chunk_state(c);
    if (c->size == 0 || c->size % kChunkAlign != 0 || c->size > bytes - off) {
      *why = "large chunk size breaks the tiling of its block";
      return false;
    }
    if (c->prev_size != prev_size) {
      *why = "large chunk's previous size disagrees with its neighbour";
      return false;
    }
    if (c->check != static_cast<uint32_t>(r.secret ^ r.offset_of(c))) {
      *why = "large chunk header overwritten";
      return false;
    }
    bool is_free = state == kChunkFree;
    bool live = chunk_state_is_live(state);
    if (!is_free && !live && state != kChunkRemote && state != kChunkQuick) {
      *why = "large chunk state overwritten";
      return false;
    }
    if (is_free && prev_free) {
      *why = "two free large chunks side by side (missed coalescing)";
      return false;
    }
    uint32_t payload = c->size - sizeof(ChunkHeader);
    if (live) {
      ++s->busy_objects;
      if (state != kChunkBusy) ++s->sampled_objects;
      s->busy_bytes += payload;
    } else {
      ++s->free_objects;
      s->free_bytes += payload;
    }
    prev_free = is_free;
    prev_size = c->size;
    off += c->size;
  }
  return true;
}

bool fail(char* message, size_t size, PageIndex p, const char* why) {
  if (size > 0) snprintf(message, size, "page %u: %s", p.value, why);
  return false;
}

}  // namespace

namespace {

// Calls fn(p, b, d, n, length_ok) for each block's first page p among the
// committed ones, n its pages; a start whose length clients overwrote
// (length_ok false, n 1) and pages inside blocks are stepped over one at a
// time.
template <class Fn>
void for_each_block_start(const Region& r, Fn&& fn) {
  uint32_t committed = r.committed_pages();
  for (uint32_t i = 0; i < committed;) {
    PageIndex p{i};
    const BlockDesc& b = r.block(p);
    PageDesc d = r.page(p);
    if (d.block != i) {
      ++i;
      continue;
    }
    uint32_t n = b.pages.value;
    bool length_ok = n != 0 && n <= committed - i;
    if (!length_ok) n = 1;
    fn(p, b, d, n, length_ok);
    i += n;
  }
}

}  // namespace

RegionStats region_stat(const Region& r, const SizeClasses& classes) {
  RegionStats s;
  const PageHeapState& h = r.header->page_heap;
  uint32_t committed = r.committed_pages();
  for_each_block_start(r, [&](PageIndex p, const BlockDesc& b, PageDesc d, uint32_t n, bool) {
    if ((d.kind == PageKind::kSegregated || d.kind == PageKind::kLarge) &&
        owner_of(b.owner_word.load(std::memory_order_relaxed)) != kNoOwner) {
      s.pages_owned += n;
    }
    if (d.kind == PageKind::kSegregated) {
      ++s.segregated_blocks;
      SegregatedCounts counts;
      const char* why = nullptr;
      if (check_segregated(r, classes, p, b, &counts, &why)) {
        const ClassInfo& c = classes.info(b.cls);
        uint32_t busy = counts.handed_out - counts.local_free - counts.remote_free;
        s.busy_objects += busy;
        s.busy_bytes += size_t{busy} * c.size;
        uint32_t free = c.end / c.size - busy;
        s.free_objects += free;
        s.free_bytes += size_t{free} * c.size;
      }
    } else if (d.kind == PageKind::kLarge) {
      ++s.large_blocks;
      const char* why = nullptr;
      check_large(r, p, b, &s, &why);
    } else if (d.kind == PageKind::kHuge) {
      // A freed run a thread keeps for reuse has its owner word set.
      bool live = b.owner_word.load(std::memory_order_acquire) == 0;
      ++s.huge_objects;
      ++(live ? s.busy_objects : s.free_objects);
      (live ? s.busy_bytes : s.free_bytes) += b.pages.bytes();
      if (live && (b.flags & kBlockSampled)) ++s.sampled_objects;
    }
  });
  s.pages_committed = committed;
  s.pages_in_use = h.in_use_pages;
  s.pages_dirty = h.dirty_pages;
  s.pages_discarded = h.discarded_pages;
  s.discard_calls = h.discard_calls;
  s.pages_discarded_total = h.discarded_total;
  return s;
}

bool region_check(const Region& r, const SizeClasses& classes, char* message, size_t size, bool skip_owned_blocks,
                  uint32_t* skipped) {
  if (size > 0) message[0] = '\0';
  if (skipped != nullptr) *skipped = 0;
  // Owned: its owner thread is changing its inside right now.
  auto owned = [&](const BlockDesc& b) {
    if (!skip_owned_blocks || (b.owner_word.load(std::memory_order_acquire) >> 1) == kNoOwner) return false;
    if (skipped != nullptr) ++*skipped;
    return true;
  };
  const PageHeapState& h = r.header->page_heap;
  if (r.header->magic != kRegionMagic || r.header->version != kFormatVersion) {
    return fail(message, size, PageIndex{0}, "region header: bad magic or version");
  }
  uint32_t committed = h.committed_pages.load(std::memory_order_acquire);
  if (committed > r.page_limit()) return fail(message, size, PageIndex{0}, "more pages committed than the region holds");
  uint32_t in_use = 0, dirty = 0, clean = 0;
  bool prev_free = false, prev_dirty = false;
  RegionStats scratch;
  for (uint32_t i = 0; i < committed;) {
    PageIndex p{i};
    PageDesc d = r.page(p);
    const BlockDesc& b = r.block(p);
    uint32_t n = b.pages.value;
    if (d.block != i) return fail(message, size, p, "descriptor of a block's first page names another block");
    if (n == 0 || n > committed - i) return fail(message, size, p, "block length out of range");
    PageDesc last = r.page(p + PageCount{n - 1});
    if (last.block != i) return fail(message, size, p, "descriptor of a block's last page names another block");
    const char* why = nullptr;
    switch (d.kind) {
      case PageKind::kFree:
      case PageKind::kPurging: {
        bool purging = d.kind == PageKind::kPurging;
        if (last.kind != d.kind) return fail(message, size, p, "free run's ends disagree");
        // Inner descriptors of a discarded run may have been given back
        // with its pages (they then read as zero: kUncommitted). They are
        // not read at all: on tmpfs, reading a page given back allocates
        // it again, and with the file system full that is a SIGBUS.
        for (uint32_t k = 1; b.run_state != kRunDiscarded && k + 1 < n; ++k) {
          PageKind inner = r.page(p + PageCount{k}).kind;
          if (inner != PageKind::kFree && inner != PageKind::kUncommitted) {
            return fail(message, size, p, "page inside a free run is not free");
          }
        }
        bool dirty_run = b.run_state == kRunDirty;
        if (!purging && prev_free && prev_dirty == dirty_run) {
          return fail(message, size, p, "two free runs of the same state side by side (missed coalescing)");
        }
        if (!purging) (dirty_run ? dirty : clean) += n;
        prev_free = !purging;
        prev_dirty = dirty_run;
        i += n;
        continue;
      }
      case PageKind::kSegregated: {
        for (uint32_t k = 0; k < n; ++k) {
          PageDesc pk = r.page(p + PageCount{k});
          if (pk.kind != PageKind::kSegregated || pk.block != i || pk.cls != d.cls) {
            return fail(message, size, p, "page of a block with another descriptor");
          }
        }
        if (b.cls != d.cls || d.cls < classes.first_class() || d.cls > classes.last_class()) {
          return fail(message, size, p, "block class disagrees with its descriptor");
        }
        if (n != classes.info(d.cls).block_pages) return fail(message, size, p, "block length wrong for its class");
        SegregatedCounts counts;
        if (!owned(b) && !check_segregated(r, classes, p, b, &counts, &why)) return fail(message, size, p, why);
        break;
      }
      case PageKind::kLarge:
        if (n != r.header->params.large_block_pages) return fail(message, size, p, "large block length wrong");
        if (!owned(b) && !check_large(r, p, b, &scratch, &why)) return fail(message, size, p, why);
        break;
      case PageKind::kHuge:
        for (uint32_t k = 0; k < n; ++k) {
          PageDesc pk = r.page(p + PageCount{k});
          if (pk.kind != PageKind::kHuge || pk.block != i) {
            return fail(message, size, p, "page of a huge object with another descriptor");
          }
        }
        break;
      default:
        return fail(message, size, p, "page of unknown kind");
    }
    in_use += n;
    prev_free = false;
    i += n;
  }
  if (in_use != h.in_use_pages) return fail(message, size, PageIndex{committed}, "pages in use miscounted");
  if (dirty != h.dirty_pages) return fail(message, size, PageIndex{committed}, "dirty pages miscounted");
  if (clean != h.discarded_pages) return fail(message, size, PageIndex{committed}, "discarded pages miscounted");
  return true;
}

namespace {

// `*extent` (if given): the bytes from p to the end of the object found,
// bounded by the block and the region whatever the descriptors say.
void* object_start(const Region& r, const SizeClasses& classes, const void* p, bool live_only,
                   uint64_t* extent = nullptr) {
  if (!r.contains(p)) return nullptr;
  Offset off = r.offset_of(p);
  uint32_t page = static_cast<uint32_t>(off >> kPageShift);
  PageDesc d = r.page(PageIndex{page});
  // The descriptors are in memory every client writes: a block that would
  // start after `p`, or a class or length that the page heap never made,
  // is no object.
  if (d.block > page) return nullptr;
  PageIndex block{d.block};
  const BlockDesc& b = r.block(block);
  char* base = r.page_address(block);
  uint32_t in_block = static_cast<uint32_t>(off - (Offset{d.block} << kPageShift));
  switch (d.kind) {
    case PageKind::kSegregated: {
      if (d.cls < classes.first_class() || d.cls > classes.last_class()) return nullptr;
      const ClassInfo& c = classes.info(d.cls);
      if (in_block >= c.end) return nullptr;
      uint32_t start = in_block / c.size * c.size;
      if (live_only && block_object_is_free(b, base, start)) return nullptr;
      if (extent != nullptr) *extent = start + c.size - in_block;
      return base + start;
    }
    case PageKind::kLarge: {
      // Its length as the page heap made it, as in check_large.
      uint32_t pages = r.header->params.large_block_pages;
      if (pages > r.page_limit() - d.block) return nullptr;
      uint64_t bytes = uint64_t{pages} << kPageShift;
      if (__atomic_load_n(&b.end, __ATOMIC_ACQUIRE) == 0) return nullptr;
      for (uint64_t o = 0; o + sizeof(ChunkHeader) <= bytes;) {
        auto* c = reinterpret_cast<const ChunkHeader*>(base + o);
        if (c->size == 0) return nullptr;
        if (in_block < o + c->size) {
          bool live = chunk_state_is_live(chunk_state(c)) && in_block >= o + sizeof(ChunkHeader);  // not quick-cached
          if (live && extent != nullptr) *extent = std::min<uint64_t>(o + c->size, bytes) - in_block;
          return live ? base + o + sizeof(ChunkHeader) : nullptr;
        }
        o += c->size;
      }
      return nullptr;
    }
    case PageKind::kHuge: {
      if (b.owner_word.load(std::memory_order_acquire) != 0) return nullptr;
      if (extent != nullptr) {
        uint64_t pages = std::min<uint64_t>(b.pages.value, r.page_limit() - d.block);
        *extent = (pages << kPageShift) > in_block ? (pages << kPageShift) - in_block : 0;
      }
      return base;
    }
    default:
      return nullptr;
  }
}

}  // namespace

size_t region_object_bytes(const Region& r, const SizeClasses& classes, const void* p) {
  uint64_t extent = 0;
  return object_start(r, classes, p, true, &extent) == p ? static_cast<size_t>(extent) : 0;
}

void* region_object_start(const Region& r, const SizeClasses& classes, const void* p) {
  return object_start(r, classes, p, true);
}

void* region_object_slot(const Region& r, const SizeClasses& classes, const void* p) {
  return object_start(r, classes, p, false);
}

void region_for_each_slot(const Region& r, const SizeClasses& classes, void (*fn)(void* context, char* start),
                          void* context) {
  for_each_block_start(r, [&](PageIndex p, const BlockDesc& b, PageDesc d, uint32_t n, bool length_ok) {
    if (!length_ok) return;
    char* base = r.page_address(p);
    if (d.kind == PageKind::kSegregated && d.cls >= classes.first_class() && d.cls <= classes.last_class()) {
      const ClassInfo& c = classes.info(d.cls);
      uint32_t bump = __atomic_load_n(&b.bump, __ATOMIC_ACQUIRE);
      for (uint32_t off = 0; off + c.size <= bump && off + c.size <= c.end; off += c.size) fn(context, base + off);
    } else if (d.kind == PageKind::kLarge && __atomic_load_n(&b.end, __ATOMIC_ACQUIRE) != 0) {
      uint64_t bytes = uint64_t{r.header->params.large_block_pages} << kPageShift;
      if (n * kPageSize < bytes) bytes = uint64_t{n} << kPageShift;
      for (uint64_t o = 0; o + sizeof(ChunkHeader) <= bytes;) {
        auto* c = reinterpret_cast<const ChunkHeader*>(base + o);
        if (c->size == 0 || c->size % kChunkAlign != 0 || c->size > bytes - o) break;
        if (chunk_state_is_live(chunk_state(c))) fn(context, base + o + sizeof(ChunkHeader));
        o += c->size;
      }
    } else if (d.kind == PageKind::kHuge && b.owner_word.load(std::memory_order_acquire) == 0) {
      fn(context, base);
    }
  });
}

}  // namespace memd::heap
