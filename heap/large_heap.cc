#include "heap/large_heap.h"

#include <algorithm>
#include <atomic>
#include <cerrno>

#include "heap/crash_point.h"
#include "heap/remote_free.h"

namespace memd::heap {
namespace {

struct FreeLinks {
  Offset next;
  Offset prev;
};
FreeLinks& links_of(ChunkHeader* c) { return *reinterpret_cast<FreeLinks*>(c + 1); }

uint32_t load_state(const ChunkHeader* c) {
  return __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
}
void store_state(ChunkHeader* c, uint32_t s) { __atomic_store_n(&c->state, s, __ATOMIC_RELEASE); }

constexpr uint32_t round_up(size_t n, uint32_t a) { return static_cast<uint32_t>((n + a - 1) & ~size_t{a - 1}); }

}  // namespace

void LargeHeap::init(const Region& r, uint32_t large_max, uint32_t block_pages, uint64_t secret) {
  region_ = r;
  blocks_ = kNoPage;
  secret_ = secret;
  block_bytes_ = block_pages * static_cast<uint32_t>(kPageSize);
  // The smallest large object is one granule above the largest medium one;
  // with none, any piece worth keeping (kNoLargeMinChunkObject).
  const HeapParams& p = r.header->params;
  uint32_t smallest = has_large_sizes(p) ? p.medium_max + 8 : kNoLargeMinChunkObject;
  min_chunk_ = round_up(smallest, kChunkAlign) + sizeof(ChunkHeader);
  // Exact bins up to the largest large object (with no large sizes, up to
  // the table's end; bigger chunks share the last bin).
  max_binned_ = round_up(std::min(large_max, kLargeMaxLimit), kChunkAlign) + sizeof(ChunkHeader);
  forget_bins();
  std::fill(std::begin(quick_has_), std::end(quick_has_), 0);
  quick_bytes_ = 0;
}

void LargeHeap::set_check(ChunkHeader* c) const {
  c->check = static_cast<uint32_t>(secret_ ^ offset_of(c));
}

void LargeHeap::bin_insert(ChunkHeader* c) {
  uint32_t bin = bin_of(c->size);
  FreeLinks& l = links_of(c);
  l.prev = kNoChunk;
  l.next = bin_has(bin) ? head_[bin] : kNoChunk;
  if (l.next != kNoChunk) links_of(chunk_at(l.next)).prev = offset_of(c);
  head_[bin] = offset_of(c);
  nonempty_[bin / 64] |= uint64_t{1} << (bin % 64);
  summary_ |= uint64_t{1} << (bin / 64);
}

void LargeHeap::bin_remove(ChunkHeader* c) {
  uint32_t bin = bin_of(c->size);
  FreeLinks& l = links_of(c);
  if (l.prev != kNoChunk) links_of(chunk_at(l.prev)).next = l.next;
  else head_[bin] = l.next;
  if (l.next != kNoChunk) links_of(chunk_at(l.next)).prev = l.prev;
  if (head_[bin] == kNoChunk) {
    nonempty_[bin / 64] &= ~(uint64_t{1} << (bin % 64));
    if (nonempty_[bin / 64] == 0) summary_ &= ~(uint64_t{1} << (bin / 64));
  }
}

ChunkHeader* LargeHeap::find_fit(uint32_t need) {
  uint32_t bin = bin_of(need);
  // The first nonempty bin at or above `bin`: its word, then the summary.
  uint32_t w = bin / 64;
  uint64_t bits = nonempty_[w] & (~uint64_t{0} << (bin % 64));
  while (bits == 0) {
    uint64_t words = w + 1 < 64 ? summary_ & (~uint64_t{0} << (w + 1)) : 0;
    if (words == 0) return nullptr;
    w = static_cast<uint32_t>(__builtin_ctzll(words));
    bits = nonempty_[w];
  }
  uint32_t b = w * 64 + static_cast<uint32_t>(__builtin_ctzll(bits));
  if (b < kBins - 1) return chunk_at(head_[b]);  // exact bin: every chunk fits
  // The last bin holds chunks of any size beyond the largest large object.
  for (Offset o = head_[b]; o != kNoChunk; o = links_of(chunk_at(o)).next) {
    if (chunk_at(o)->size >= need) return chunk_at(o);
  }
  return nullptr;
}

void LargeHeap::split(ChunkHeader* c, uint32_t need, char* block_end) {
  if (c->size - need < min_chunk_) return;
  auto* rest = reinterpret_cast<ChunkHeader*>(reinterpret_cast<char*>(c) + need);
  rest->size = c->size - need;
  rest->prev_size = need;
  set_check(rest);
  store_state(rest, kChunkFree);
  c->size = need;
  if (ChunkHeader* after = next_chunk(rest, block_end)) after->prev_size = rest->size;
  bin_insert(rest);
}

void* LargeHeap::alloc(BlockSource& source, OwnerId owner, size_t size, size_t align, bool* zeroed) {
  uint32_t need = std::max(round_up(size, kChunkAlign) + uint32_t{sizeof(ChunkHeader)}, min_chunk_);
  // An aligned request needs room to move its start and free what is skipped.
  uint32_t search = align > kChunkAlign ? need + static_cast<uint32_t>(align) + min_chunk_ : need;
  if (search > block_bytes_) {
    errno = ENOMEM;
    return nullptr;
  }
  // Chunk headers and free-list links are written all over a large block, so
  // its memory is never reported as zero.
  *zeroed = false;
  if (align <= kChunkAlign) {
    if (void* q = try_quick(size)) return q;
  }
  ChunkHeader* c = find_or_grow(source, owner, search);
  if (c == nullptr) return nullptr;
  bin_remove(c);
  char* block_end = region_.page_address(block_of(c)) + block_bytes_;
  if (align > kChunkAlign) c = align_start(c, align, block_end);
  split(c, need, block_end);
  set_check(c);
  store_state(c, kChunkBusy);
  return c + 1;
}

ChunkHeader* LargeHeap::find_or_grow(BlockSource& source, OwnerId owner, uint32_t search) {
  if (ChunkHeader* c = find_fit(search)) return c;
  if (quick_bytes_ > 0) {
    // Merge the quick cache before asking for a new block. A block it empties
    // stays binned for this very allocation.
    flush_quick([this](PageIndex block) { keep_empty_block(block); });
    if (ChunkHeader* c = find_fit(search)) return c;
  }
  for (;;) {
    AcquiredBlock got = source.acquire(PageKind::kLarge, 0, owner);
    if (got.first == kNoPage) return nullptr;
    add_block(got.first);
    if (got.adopted) adopt(got.first);
    else lay_out_block(got.first);
    if (ChunkHeader* c = find_fit(search)) return c;
    // An adopted block too full for this request: ask for another.
  }
}

void LargeHeap::lay_out_block(PageIndex block) {
  auto* c = reinterpret_cast<ChunkHeader*>(region_.page_address(block));
  c->size = block_bytes_;
  c->prev_size = 0;
  set_check(c);
  store_state(c, kChunkFree);
  __atomic_store_n(&region_.block(block).taken, 0, __ATOMIC_RELAXED);
  // `end` last: a large block whose end is 0 was never laid out (a client's
  // spare, or one caught by a crash before this point).
  __atomic_store_n(&region_.block(block).end, block_bytes_, __ATOMIC_RELEASE);
  bin_insert(c);
}

ChunkHeader* LargeHeap::align_start(ChunkHeader* c, size_t align, char* block_end) {
  uintptr_t payload = reinterpret_cast<uintptr_t>(c + 1);
  uintptr_t aligned = (payload + align - 1) & ~(uintptr_t{align} - 1);
  while (aligned != payload && aligned - payload < min_chunk_) aligned += align;
  if (aligned == payload) return c;
  // Free the skipped front as a chunk of its own.
  uint32_t lead = static_cast<uint32_t>(aligned - payload);
  auto* moved = reinterpret_cast<ChunkHeader*>(reinterpret_cast<char*>(c) + lead);
  moved->size = c->size - lead;
  moved->prev_size = lead;
  c->size = lead;
  set_check(c);
  store_state(c, kChunkFree);
  if (ChunkHeader* after = next_chunk(moved, block_end)) after->prev_size = moved->size;
  bin_insert(c);
  return moved;
}

ChunkHeader* LargeHeap::header_of(const Region& r, uint64_t secret, PageIndex block, void* p) {
  auto* c = static_cast<ChunkHeader*>(p) - 1;
  char* block_base = r.page_address(block);
  uint32_t block_bytes = r.block(block).pages.value * static_cast<uint32_t>(kPageSize);
  auto addr = reinterpret_cast<char*>(c);
  if ((reinterpret_cast<uintptr_t>(p) & (kChunkAlign - 1)) != 0 || addr < block_base ||
      addr + sizeof(ChunkHeader) > block_base + block_bytes) {
    return nullptr;
  }
  if (c->check != static_cast<uint32_t>(secret ^ r.offset_of(c))) return nullptr;
  return c;
}

ChunkHeader* LargeHeap::release_chunk(ChunkHeader* c, char* block_base) {
  char* block_end = block_base + block_bytes_;
  store_state(c, kChunkFree);
  ChunkHeader* after = next_chunk(c, block_end);
  if (after && load_state(after) == kChunkFree) {
    bin_remove(after);
    c->size += after->size;
  }
  if (c->prev_size != 0) {
    auto* before = reinterpret_cast<ChunkHeader*>(reinterpret_cast<char*>(c) - c->prev_size);
    if (load_state(before) == kChunkFree) {
      bin_remove(before);
      before->size += c->size;
      c = before;
    }
  }
  if (ChunkHeader* n = next_chunk(c, block_end)) n->prev_size = c->size;
  if (c->size != block_bytes_) bin_insert(c);
  return c;
}

LargeFreeResult LargeHeap::free_merging(PageIndex block, ChunkHeader* c) {
  c = release_chunk(c, region_.page_address(block));
  return c->size == block_bytes_ ? LargeFreeResult::kBlockEmpty : LargeFreeResult::kFreed;
}

bool LargeHeap::block_is_empty(PageIndex block) const {
  auto* first = reinterpret_cast<const ChunkHeader*>(region_.page_address(block));
  return first->size == block_bytes_ && load_state(first) == kChunkFree;
}

void LargeHeap::keep_empty_block(PageIndex block) {
  bin_insert(reinterpret_cast<ChunkHeader*>(region_.page_address(block)));
}

void LargeHeap::forget_empty_block(PageIndex block) {
  bin_remove(reinterpret_cast<ChunkHeader*>(region_.page_address(block)));
}

LargeFreeResult LargeHeap::claim_remote(const Region& r, uint64_t secret, PageIndex block, void* p) {
  ChunkHeader* c = header_of(r, secret, block, p);
  if (c == nullptr) return LargeFreeResult::kInvalid;
  uint32_t expected = kChunkBusy;
  if (!__atomic_compare_exchange_n(&c->state, &expected, kChunkRemote, false, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE)) {
    return chunk_state_is_free(expected) ? LargeFreeResult::kDoubleFree : LargeFreeResult::kInvalid;
  }
  return LargeFreeResult::kFreed;
}

bool LargeHeap::collect_remote(PageIndex block) {
  BlockDesc& b = region_.block(block);
  // Every chunk is released (merged with its neighbours) one by one, so the
  // list is walked whatever its count says.
  uint32_t head = RemoteList::head_of(remote_take(b));
  if (head == 0) return false;
  char* base = region_.page_address(block);
  bool empty = false;
  uint32_t limit = block_bytes_ / min_chunk_ + 1;
  while (head != 0 && limit--) {
    auto* c = reinterpret_cast<ChunkHeader*>(base + head - 1);
    uint32_t next = *reinterpret_cast<uint32_t*>(c + 1);
    remote_taken_at(b, head, next);  // release_chunk may write bin links over `next`
    crash_point("large.remote_taken");  // chunks before c released, c and the rest not
    empty = release_chunk(c, base)->size == block_bytes_;
    head = next;
  }
  remote_taken_done(b);
  return empty;
}

namespace {

// Merges every run of adjacent free chunks of an unbinned block into one
// chunk (chunks freed while the block had no owner were not merged).
void merge_free_runs(char* base, uint32_t bytes) {
  char* end = base + bytes;
  // Chunks in a quick cache whose owner is gone are free.
  for (char* at = base; at < end; at += reinterpret_cast<ChunkHeader*>(at)->size) {
    auto* c = reinterpret_cast<ChunkHeader*>(at);
    if (load_state(c) == kChunkQuick) store_state(c, kChunkFree);
  }
  for (char* at = base; at < end;) {
    auto* c = reinterpret_cast<ChunkHeader*>(at);
    if (load_state(c) == kChunkFree) {
      for (char* n = at + c->size; n < end && load_state(reinterpret_cast<ChunkHeader*>(n)) == kChunkFree;
           n = at + c->size) {
        c->size += reinterpret_cast<ChunkHeader*>(n)->size;
      }
      if (at + c->size < end) reinterpret_cast<ChunkHeader*>(at + c->size)->prev_size = c->size;
    }
    at += c->size;
  }
}

}  // namespace

bool LargeHeap::adopt(PageIndex block) {
  char* base = region_.page_address(block);
  char* end = base + block_bytes_;
  merge_free_runs(base, block_bytes_);
  for (auto* c = reinterpret_cast<ChunkHeader*>(base); c; c = next_chunk(c, end)) {
    if (load_state(c) == kChunkFree && c->size != block_bytes_) bin_insert(c);
  }
  collect_remote(block);
  auto* first = reinterpret_cast<ChunkHeader*>(base);
  if (first->size == block_bytes_ && load_state(first) == kChunkFree) {
    bin_insert(first);  // empty: keep it usable; the owner decides to release
    return true;
  }
  return false;
}

bool LargeHeap::collect_abandoned(const Region& r, PageIndex block) {
  BlockDesc& b = r.block(block);
  char* base = r.page_address(block);
  uint32_t bytes = b.pages.value * static_cast<uint32_t>(kPageSize);
  uint32_t head = RemoteList::head_of(remote_take(b));
  for (uint32_t limit = bytes / kPageSize * 8; head != 0 && limit--;) {
    auto* c = reinterpret_cast<ChunkHeader*>(base + head - 1);
    uint32_t next = *reinterpret_cast<uint32_t*>(c + 1);
    remote_taken_at(b, head, next);
    store_state(c, kChunkFree);
    head = next;
  }
  remote_taken_done(b);
  merge_free_runs(base, bytes);
  auto* first = reinterpret_cast<ChunkHeader*>(base);
  return first->size == bytes && load_state(first) == kChunkFree;
}

void LargeHeap::forget_bins() {
  // The heads need no reset: a head is read only where its bit is set.
  std::fill(std::begin(nonempty_), std::end(nonempty_), 0);
  summary_ = 0;
}

void LargeHeap::add_block(PageIndex block) {
  BlockDesc& b = region_.block(block);
  b.prev = kNoPage;
  b.next = blocks_;
  if (blocks_ != kNoPage) region_.block(blocks_).prev = block;
  blocks_ = block;
}

void LargeHeap::drop_block(PageIndex block) {
  BlockDesc& b = region_.block(block);
  if (b.prev != kNoPage) region_.block(b.prev).next = b.next;
  else blocks_ = b.next;
  if (b.next != kNoPage) region_.block(b.next).prev = b.prev;
  b.prev = b.next = kNoPage;
}

bool LargeHeap::resize_in_place(PageIndex block, void* p, size_t size) {
  auto* c = static_cast<ChunkHeader*>(p) - 1;
  char* block_end = region_.page_address(block) + block_bytes_;
  uint32_t need = std::max(round_up(size, kChunkAlign) + uint32_t{sizeof(ChunkHeader)}, min_chunk_);
  if (need > block_bytes_) return false;
  if (need > c->size) {
    ChunkHeader* after = next_chunk(c, block_end);
    if (!after || load_state(after) != kChunkFree || c->size + after->size < need) return false;
    bin_remove(after);
    c->size += after->size;
    if (ChunkHeader* n = next_chunk(c, block_end)) n->prev_size = c->size;
  }
  // Give back the tail (merging it with a free successor) when it is big enough.
  if (c->size - need >= min_chunk_) {
    ChunkHeader* after = next_chunk(c, block_end);
    uint32_t tail = c->size - need;
    if (after && load_state(after) == kChunkFree) {
      bin_remove(after);
      tail += after->size;
    }
    c->size = need;
    auto* rest = reinterpret_cast<ChunkHeader*>(reinterpret_cast<char*>(c) + need);
    rest->size = tail;
    rest->prev_size = need;
    set_check(rest);
    store_state(rest, kChunkFree);
    if (ChunkHeader* n = next_chunk(rest, block_end)) n->prev_size = rest->size;
    bin_insert(rest);
  }
  return true;
}

}  // namespace memd::heap
