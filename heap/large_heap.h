// Large objects (medium_max < size <= large_max): objects with 16-byte
// headers sharing large blocks (20 pages by default), best fit through a
// free-list table indexed by size (16 bytes apart, to keep malloc's 16-byte
// alignment), immediate coalescing with both neighbours, and splitting when
// the rest can hold the smallest large object. A bitmap over the table makes
// the best-fit search a few word scans (the hierarchical index the Vam paper
// proposes).
//
// One LargeHeap belongs to one owner (thread heap); only it touches its bins
// and the free chunks of its blocks. Frees from other threads arrive through
// the block's remote list.
//
// Coalescing is immediate, as in Vam, except for a bounded quick cache: a
// freed chunk of up to kQuickMaxChunk bytes first waits, unmerged, on a
// per-size list (kQuickBytes in all), where an allocation of the same size
// takes it back at once. Malloc-then-free of one size (most programs' large
// objects) then costs two list operations instead of a split and a merge.
// The cache is flushed (merged) before a new block is taken, at compaction
// and at thread exit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "heap/block_source.h"
#include "heap/layout.h"
#include "heap/size_class.h"

namespace memd::heap {

inline constexpr uint32_t kChunkBusy = 0x6c61726bu;    // "lark"
inline constexpr uint32_t kChunkFree = 0x66726565u;    // "free"
inline constexpr uint32_t kChunkRemote = 0x72656d6fu;  // freed by a non-owner, not yet collected
inline constexpr uint32_t kChunkQuick = 0x7175696bu;   // freed by the owner, kept unmerged for reuse

// A live chunk holding an allocation sample (heap/sampling.h). The mark keeps
// it off the owner's inline free, so only sampled frees ever reach the
// sampling hooks, and it says how the allocation was counted: the low 16 bits
// are its size class, or kSampledAsLarge. It stays in a persistent region
// across crashes, so whichever process frees the object counts it as its
// allocation was counted.
inline constexpr uint32_t kChunkSampled = 0x73610000u;  // "sa" and a counted class
inline constexpr uint32_t kSampledAsLarge = 0xffffu;

// Whether a chunk in `state` is free (for statistics and double-free checks).
inline bool chunk_state_is_free(uint32_t state) {
  return state == kChunkFree || state == kChunkRemote || state == kChunkQuick;
}
// How a sampled chunk's allocation was counted: a size class or kSampledAsLarge.
inline uint32_t sampled_counted_as(uint32_t state) { return state & 0xffffu; }
// A sampled chunk's state: the mark and a counted class that can be.
inline bool chunk_state_is_sampled(uint32_t state) {
  return (state & 0xffff0000u) == kChunkSampled &&
         (sampled_counted_as(state) == kSampledAsLarge || sampled_counted_as(state) < kMaxSegregatedClasses);
}
// Live: handed out and not freed (sampled or not).
inline bool chunk_state_is_live(uint32_t state) { return state == kChunkBusy || chunk_state_is_sampled(state); }

// Sits just before every large object. All fields but `state` are written by
// the owner only; `state` is accessed atomically (remote frees claim a chunk).
struct ChunkHeader {
  uint32_t size;       // whole chunk in bytes, header included; multiple of 16
  uint32_t prev_size;  // size of the chunk just before, 0 for a block's first
  uint32_t state;      // kChunk*
  uint32_t check;      // low bits of (secret ^ offset): catches stray pointers
};
static_assert(sizeof(ChunkHeader) == 16);

inline constexpr uint32_t kChunkAlign = 16;

enum class LargeFreeResult { kFreed, kBlockEmpty, kInvalid, kDoubleFree };

// The largest large_max the free-list table covers (exact bins of 16 bytes).
inline constexpr uint32_t kLargeMaxLimit = 32768;
// With no large sizes (large_max == medium_max), large blocks hold only
// sampled objects and page-aligned ones, of any size up to medium_max: the
// smallest piece of a chunk worth splitting off then holds this much.
inline constexpr uint32_t kNoLargeMinChunkObject = 1024;

class LargeHeap {
 public:
  void init(const Region& r, uint32_t large_max, uint32_t block_pages, uint64_t secret);

  // REQUIRES: medium_max < size <= large_max, align a power of two <= 4096.
  void* alloc(BlockSource& source, OwnerId owner, size_t size, size_t align, bool* zeroed);

  // A quick-cached chunk for `size` bytes (16-byte aligned), or nullptr.
  // Its payload bytes are usable_size of the result.
  void* try_quick(size_t size) {
    uint32_t need = static_cast<uint32_t>((size + kChunkAlign - 1) & ~size_t{kChunkAlign - 1}) +
                    uint32_t{sizeof(ChunkHeader)};
    if (need < min_chunk_) need = min_chunk_;
    uint32_t bin = need / kChunkAlign;
    if (need > kQuickMaxChunk || !quick_has(bin)) return nullptr;
    ChunkHeader* q = chunk_at(quick_[bin]);
    quick_[bin] = *reinterpret_cast<Offset*>(q + 1);
    if (quick_[bin] == kNoChunk) quick_has_[bin / 64] &= ~(uint64_t{1} << (bin % 64));
    quick_bytes_ -= q->size;
    __atomic_store_n(&q->state, kChunkBusy, __ATOMIC_RELEASE);
    return q + 1;
  }

  // Frees a chunk of a block this heap owns; `*usable` (if given) gets its
  // payload bytes when it was live. kBlockEmpty: the block is now one free
  // chunk and has been taken out of the bins; the caller decides whether to
  // keep or release it (reinsert with keep_empty_block). Inline up to the
  // quick cache, the common case: a pointer check, a state check, a push.
  // A sampled chunk is kInvalid here: its free first goes through
  // unmark_sampled.
  LargeFreeResult free_local(PageIndex block, void* p, size_t* usable = nullptr) {
    auto* c = static_cast<ChunkHeader*>(p) - 1;
    Offset off = static_cast<Offset>(static_cast<char*>(p) - region_.data) - sizeof(ChunkHeader);
    auto in_block = static_cast<uint64_t>(off + sizeof(ChunkHeader) - (Offset{block.value} << kPageShift));
    // Every block of this heap is block_bytes_ long (the region's setting).
    if (__builtin_expect((in_block & (kChunkAlign - 1)) != 0 || in_block < sizeof(ChunkHeader) ||
                             in_block > block_bytes_ || c->check != static_cast<uint32_t>(secret_ ^ off),
                         0)) {
      return LargeFreeResult::kInvalid;
    }
    uint32_t state = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
    if (__builtin_expect(state != kChunkBusy, 0)) {
      return chunk_state_is_free(state) ? LargeFreeResult::kDoubleFree : LargeFreeResult::kInvalid;
    }
    uint32_t size = c->size;
    if (usable) *usable = size - sizeof(ChunkHeader);
    if (size <= kQuickMaxChunk && quick_bytes_ + size <= kQuickBytes) {
      __atomic_store_n(&c->state, kChunkQuick, __ATOMIC_RELEASE);
      uint32_t bin = size / kChunkAlign;
      *reinterpret_cast<Offset*>(c + 1) = quick_has(bin) ? quick_[bin] : kNoChunk;
      quick_[bin] = off;
      quick_has_[bin / 64] |= uint64_t{1} << (bin % 64);
      quick_bytes_ += size;
      return LargeFreeResult::kFreed;
    }
    return free_merging(block, c);
  }
  void keep_empty_block(PageIndex block);
  bool block_is_empty(PageIndex block) const;
  void forget_empty_block(PageIndex block);

  // Claims a chunk for a free by a non-owner; false if it is not a live chunk.
  static LargeFreeResult claim_remote(const Region& r, uint64_t secret, PageIndex block, void* p);

  // Moves a block's remote frees into this heap. Returns true if the block
  // became empty (then it is out of the bins, as with kBlockEmpty).
  bool collect_remote(PageIndex block);

  // Merges every quick-cached chunk into the bins; calls on_empty(block) for
  // each block that becomes empty (it is then out of the bins).
  template <class F>
  void flush_quick(F on_empty);

  // Adds the free chunks of an adopted block to the bins, merging free
  // neighbours. True if empty.
  bool adopt(PageIndex block);

  // For a block no heap owns: marks its remotely freed chunks free (merging
  // happens at adoption). Returns whether every chunk is now free.
  static bool collect_abandoned(const Region& r, PageIndex block);

  // Empties the bins (init, and a heap being torn down: blocks stay listed).
  void forget_bins();

  // Validates `p` as a live chunk of a large block; returns its header.
  static ChunkHeader* header_of(const Region& r, uint64_t secret, PageIndex block, void* p);

  // Marks the live chunk at `p` as a sample counted as `counted` (a size
  // class or kSampledAsLarge). Before p is handed out.
  static void mark_sampled(void* p, uint32_t counted) {
    __atomic_store_n(&(static_cast<ChunkHeader*>(p) - 1)->state, kChunkSampled | (counted & 0xffffu),
                     __ATOMIC_RELEASE);
  }
  // Takes the mark off a sampled chunk for its free: the state it had, or 0
  // if it was not a sampled chunk (or another free took the mark first).
  static uint32_t unmark_sampled(ChunkHeader* c) {
    uint32_t state = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
    if (!chunk_state_is_sampled(state) ||
        !__atomic_compare_exchange_n(&c->state, &state, kChunkBusy, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      return 0;
    }
    return state;
  }

  // Payload bytes of the live chunk at `p`.
  static size_t usable_size(void* p) { return static_cast<ChunkHeader*>(p)[-1].size - sizeof(ChunkHeader); }

  // Grows or shrinks the chunk at `p` in place to hold `size` bytes.
  bool resize_in_place(PageIndex block, void* p, size_t size);

  uint32_t block_bytes() const { return block_bytes_; }

  // The large blocks this heap owns (linked through BlockDesc::prev/next).
  PageIndex first_block() const { return blocks_; }
  void drop_block(PageIndex block);

 private:
  static constexpr uint32_t kBins = (kLargeMaxLimit + sizeof(ChunkHeader)) / kChunkAlign + 2;
  static constexpr uint32_t kQuickMaxChunk = 16384 + 16;  // a 16 KiB object and its header
  static constexpr uint32_t kQuickBytes = 256 * 1024;
  static constexpr uint32_t kQuickBins = kQuickMaxChunk / 16 + 1;
  static constexpr uint32_t kBinWords = (kBins + 63) / 64;
  static constexpr uint32_t kQuickWords = (kQuickBins + 63) / 64;
  static constexpr Offset kNoChunk = ~Offset{0};  // the end of a list
  static_assert(kBinWords <= 64, "the summary word covers every bin word");

  // Exact bins up to the largest large object; one bin for bigger free chunks.
  uint32_t bin_of(uint32_t chunk_size) const {
    return chunk_size <= max_binned_ ? chunk_size / kChunkAlign : kBins - 1;
  }
  ChunkHeader* chunk_at(Offset off) const { return reinterpret_cast<ChunkHeader*>(region_.data + off); }
  Offset offset_of(const ChunkHeader* c) const { return reinterpret_cast<const char*>(c) - region_.data; }
  ChunkHeader* next_chunk(ChunkHeader* c, const char* block_end) const {
    char* n = reinterpret_cast<char*>(c) + c->size;
    return n < block_end ? reinterpret_cast<ChunkHeader*>(n) : nullptr;
  }
  void bin_insert(ChunkHeader* c);
  void bin_remove(ChunkHeader* c);
  ChunkHeader* find_fit(uint32_t need);
  // Marks `c` free, merges it with free neighbours, bins the result unless it
  // spans the whole block. Returns the merged chunk.
  ChunkHeader* release_chunk(ChunkHeader* c, char* block_base);
  // Cuts `c` to `need` bytes when the rest can be a chunk; bins the rest.
  void split(ChunkHeader* c, uint32_t need, char* block_end);
  void set_check(ChunkHeader* c) const;
  PageIndex block_of(const ChunkHeader* c) const {
    return PageIndex{region_.page(PageIndex{static_cast<uint32_t>(offset_of(c) >> kPageShift)}).block};
  }

  void add_block(PageIndex block);
  // Lays out a new block as one free chunk and bins it.
  void lay_out_block(PageIndex block);
  // A binned free chunk of at least `search` bytes, from the bins, the quick
  // cache merged back, or a new (or adopted) block; nullptr if the source
  // has none.
  ChunkHeader* find_or_grow(BlockSource& source, OwnerId owner, uint32_t search);
  // Moves the start of free chunk `c` (not binned) so that its payload is
  // aligned to `align`, freeing the skipped front as a chunk of its own.
  ChunkHeader* align_start(ChunkHeader* c, size_t align, char* block_end);
  // free_local past the quick cache: merge with free neighbours.
  LargeFreeResult free_merging(PageIndex block, ChunkHeader* c);

  Region region_{};
  PageIndex blocks_ = kNoPage;
  uint64_t secret_ = 0;
  uint32_t block_bytes_ = 0;
  uint32_t min_chunk_ = 0;
  uint32_t max_binned_ = 0;
  bool bin_has(uint32_t bin) const { return (nonempty_[bin / 64] >> (bin % 64)) & 1; }
  bool quick_has(uint32_t bin) const { return (quick_has_[bin / 64] >> (bin % 64)) & 1; }

  // The list heads are read only where a bit says they hold chunks, so
  // init leaves them as they are: a thread heap's first use touches 24 KiB
  // fewer of its pages (each thread's, and the stranger's, which most
  // processes never use).
  uint64_t nonempty_[kBinWords];     // bit per bin: has chunks (head_ valid)
  uint64_t summary_ = 0;             // bit per word of nonempty_: has a set bit
  uint64_t quick_has_[kQuickWords];  // bit per quick bin: has chunks (quick_ valid)
  uint32_t quick_bytes_ = 0;         // bytes of chunks in the quick cache
  Offset head_[kBins];
  Offset quick_[kQuickBins];  // quick-cached chunks by size (link: payload's first word)
};

template <class F>
void LargeHeap::flush_quick(F on_empty) {
  if (quick_bytes_ == 0) return;
  for (uint32_t w = 0; w < kQuickWords; ++w) {
    for (uint64_t bits = quick_has_[w]; bits != 0; bits &= bits - 1) {
      uint32_t bin = w * 64 + static_cast<uint32_t>(__builtin_ctzll(bits));
      for (Offset o = quick_[bin]; o != kNoChunk;) {
        ChunkHeader* c = chunk_at(o);
        o = *reinterpret_cast<Offset*>(c + 1);
        PageIndex block = block_of(c);
        if (release_chunk(c, region_.page_address(block))->size == block_bytes_) on_empty(block);
      }
    }
    quick_has_[w] = 0;
  }
  quick_bytes_ = 0;
}

}  // namespace memd::heap
