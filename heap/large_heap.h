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
#pragma once

#include <cstddef>
#include <cstdint>

#include "heap/block_source.h"
#include "heap/layout.h"

namespace memd::heap {

inline constexpr uint32_t kChunkBusy = 0x6c61726bu;    // "lark"
inline constexpr uint32_t kChunkFree = 0x66726565u;    // "free"
inline constexpr uint32_t kChunkRemote = 0x72656d6fu;  // freed by a non-owner, not yet collected

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

class LargeHeap {
 public:
  void init(const Region& r, uint32_t large_max, uint32_t block_pages, uint64_t secret);

  // REQUIRES: medium_max < size <= large_max, align a power of two <= 4096.
  void* alloc(BlockSource& source, OwnerId owner, size_t size, size_t align, bool* zeroed);

  // Frees a chunk of a block this heap owns. kBlockEmpty: the block is now one
  // free chunk and has been taken out of the bins; the caller decides whether
  // to keep or release it (reinsert with keep_empty_block).
  LargeFreeResult free_local(PageIndex block, void* p);
  void keep_empty_block(PageIndex block);
  void forget_empty_block(PageIndex block);

  // Claims a chunk for a free by a non-owner; false if it is not a live chunk.
  static LargeFreeResult claim_remote(const Region& r, uint64_t secret, PageIndex block, void* p);

  // Moves a block's remote frees into this heap. Returns true if the block
  // became empty (then it is out of the bins, as with kBlockEmpty).
  bool collect_remote(PageIndex block);

  // Adds the free chunks of an adopted block to the bins, merging free
  // neighbours. True if empty.
  bool adopt(PageIndex block);

  // For a block no heap owns: marks its remotely freed chunks free (merging
  // happens at adoption). Returns whether every chunk is now free.
  static bool collect_abandoned(const Region& r, PageIndex block);

  // Drops every free chunk of `block` from the bins (before abandoning it).
  void unbin_block(PageIndex block);

  // Validates `p` as a live chunk of a large block; returns its header.
  static ChunkHeader* header_of(const Region& r, uint64_t secret, PageIndex block, void* p);

  // Payload bytes of the live chunk at `p`.
  static size_t usable_size(void* p) { return static_cast<ChunkHeader*>(p)[-1].size - sizeof(ChunkHeader); }

  // Grows or shrinks the chunk at `p` in place to hold `size` bytes.
  bool resize_in_place(PageIndex block, void* p, size_t size);

  uint32_t block_bytes() const { return block_bytes_; }

  // The large blocks this heap owns (linked through BlockDesc::prev/next).
  PageIndex first_block() const { return blocks_; }
  void drop_block(PageIndex block);

 private:
  static constexpr uint32_t kBins = 2051;
  static constexpr uint32_t kBinWords = (kBins + 63) / 64;
  static_assert(kBinWords <= 64, "the summary word covers every bin word");

  uint32_t bin_of(uint32_t chunk_size) const;
  ChunkHeader* chunk_at(Offset off) const { return reinterpret_cast<ChunkHeader*>(region_.data + off); }
  Offset offset_of(const ChunkHeader* c) const { return reinterpret_cast<const char*>(c) - region_.data; }
  ChunkHeader* next_chunk(ChunkHeader* c, const char* block_end) const;
  void bin_insert(ChunkHeader* c);
  void bin_remove(ChunkHeader* c);
  ChunkHeader* find_fit(uint32_t need);
  // Marks `c` free, merges it with free neighbours, bins the result unless it
  // spans the whole block. Returns the merged chunk.
  ChunkHeader* release_chunk(ChunkHeader* c, char* block_base);
  // Cuts `c` to `need` bytes when the rest can be a chunk; bins the rest.
  void split(ChunkHeader* c, uint32_t need, char* block_end);
  void set_check(ChunkHeader* c) const;

  void add_block(PageIndex block);

  Region region_{};
  PageIndex blocks_ = kNoPage;
  uint64_t secret_ = 0;
  uint32_t block_bytes_ = 0;
  uint32_t min_chunk_ = 0;
  uint32_t max_binned_ = 0;
  Offset head_[kBins];
  uint64_t nonempty_[kBinWords];  // bit per bin: has chunks
  uint64_t summary_ = 0;          // bit per word of nonempty_: has a set bit
};

}  // namespace memd::heap
