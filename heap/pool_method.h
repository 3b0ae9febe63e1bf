// Vmalloc's pool method: objects of one size, fixed by the first allocation
// after the region is made or cleared. Objects carry no header; each chunk
// (method_chunks.h) starts with a bitmap of its objects (1: taken), so that
//
//   alloc: from the thread's cache (PoolCache: objects of one bitmap word it
//          claimed whole, with one fetch_or); when it is empty, claim the
//          free bits of the next word of a chunk with room
//   free:  find the chunk from the pointer's page descriptor; an object of
//          the word the thread has claimed goes back to its cache, any
//          other clears its bit (one fetch_and); a bit already clear, or
//          already back in the cache, is a double free
//
// Lock-free and shared by every process of the region: nothing reads or
// writes inside a free object, so there is no free list to corrupt and no
// ABA. The state lives in the region (PoolState, one per region).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "heap/method_chunks.h"

namespace memd::heap {

inline constexpr uint32_t kPoolMaxObjectsPerChunk = 4096;

struct alignas(64) PoolState {
  std::atomic<uint64_t> size;    // the fixed request size, 0: none yet
  std::atomic<uint64_t> chunks;  // offset + 1 of the newest chunk, 0: none
  std::atomic<uint64_t> hint;    // offset + 1 of a chunk that had room, 0: none known
  std::atomic<uint32_t> room;    // 1: a chunk may have room that no hint names
  std::atomic<uint32_t> pad;
  std::atomic<uint64_t> clears;  // clears since creation
};

inline constexpr uint32_t kPoolCacheFreed = 16;

// What one thread's pool cache holds, kept in the region (one record per
// owner slot, in the reserved root "memd:pool-caches"), so that when a
// process dies the objects its threads held go back to the pool as their
// slots are reclaimed (pool_return_record), not only at the next clear.
// Written by the thread that holds the slot, in an order that makes a crash
// at any point leak at most what is in flight and never give back an object
// that is live: a record names objects only while they are the cache's (a
// word's record is emptied before it changes, an object leaves the record
// before it is handed out, and a flush empties the record before it clears
// the bits).
//
// A claim itself is in flight between taking a word's free bits and the
// record saying so. The claimer holds its chunk's claim lock meanwhile (no
// other thread takes bits of that chunk), and the record names the lock
// before it is taken and the word's bits the claim expects before it takes
// them (`claiming`, `claim_word`, `claim_old`). So a claimer killed at any
// point leaks nothing: whoever returns its record finds the lock still held
// and gives back the bits clear in `claim_old` (those the claim took, if it
// got that far; still clear, if not), then releases the lock.
struct alignas(64) PoolCacheRecord {
  uint64_t clears;       // the pool's clears when the word was claimed
  uint64_t chunk;        // data offset + 1 of the claimed word's chunk, 0: none
  uint64_t mask;         // objects of the word not handed out yet
  uint32_t word;
  uint32_t freed_count;
  uint64_t freed[kPoolCacheFreed];  // data offsets of objects freed into the cache
  // Zero in records made before claims were recorded: no claim in flight.
  uint64_t claiming;    // data offset + 1 of the chunk whose claim lock it takes or holds, 0: none
  uint64_t claim_old;   // the bits of that word its pending claim expects
  uint32_t claim_word;  // word + 1 of the pending claim, 0: none
};
static_assert(sizeof(PoolCacheRecord) == 192);

// One thread's cache of pool objects (it lives in the thread heap): objects
// it freed lately and the rest of a bitmap word it claimed whole. Both stay
// taken in the bitmap, so a pair of this thread's alloc and free touches no
// shared word at all (as glibc's tcache); what it holds is mirrored in its
// record, when it has one. pool_cache_flush gives them back when the thread
// leaves; a clear of the pool makes every cache stale (`clears`).
struct PoolCache {
  const PoolState* state = nullptr;
  uint64_t clears = 0;
  uint64_t size = 0;       // the pool's request size when filled
  char* chunk = nullptr;   // the claimed word's chunk
  char* first = nullptr;   // the word's first object
  uint32_t stride = 0;
  uint32_t word = 0;
  uint64_t mask = 0;       // objects of the word not handed out yet
  uint32_t freed_count = 0;
  void* freed[kPoolCacheFreed] = {};  // freed by this thread, not handed out again yet
  // Where this thread's next claim starts (kept across flushes).
  char* cursor_chunk = nullptr;
  uint32_t cursor_word = 0;
  // Chunks this thread has checked since the last clear: a free into one
  // needs neither its page descriptor nor its header checked again (chunks
  // go only at a clear, which makes the cache stale).
  static constexpr uint32_t kKnownChunks = 4;
  char* known[kKnownChunks] = {};
  uint64_t known_end[kKnownChunks] = {};  // past the last object, as an address
  uint32_t known_next = 0;
  // This thread's record in the region (its owner slot's), or nullptr (no
  // records: the cache's objects then leak if the process dies). Kept across
  // flushes; the region layer sets it before the thread's first allocation.
  PoolCacheRecord* record = nullptr;
};

struct PoolStats {
  uint64_t object_size = 0;  // the fixed request size, 0: not fixed yet
  uint64_t stride = 0;       // bytes each object takes
  uint64_t chunks = 0;
  uint64_t live = 0;         // objects allocated and not freed, and those in
                             // other threads' caches (at most 79 each)
  uint64_t capacity = 0;     // objects the chunks hold
  uint64_t chunk_bytes = 0;
};

enum class MethodFree { kOk, kNotObject, kDoubleFree, kIgnored };

// Objects of one pool may be as big as this (so that a chunk's offsets fit
// 32 bits, the reciprocal's range).
inline constexpr size_t kPoolMaxObject = size_t{64} << 20;

// `cache`: the calling thread's, or nullptr for a caller that shares its
// heap with other threads. nullptr and errno: EINVAL for a size other than
// the pool's (or 0, or past kPoolMaxObject), ENOMEM when no chunk can be had.
void* pool_alloc(const Region& r, PoolState& s, ChunkSource& chunks, PoolCache* cache, size_t size);
MethodFree pool_free(const Region& r, PoolState& s, PoolCache* cache, void* p);
// Whether p is a live object of the pool, and its usable size (0: not one).
size_t pool_size(const Region& r, const PoolState& s, const PoolCache* cache, const void* p);
// Gives the cache's objects back to the bitmap (a thread leaving, stats).
void pool_cache_flush(const Region& r, PoolCache* cache);
// Gives back the objects a dead thread's record names (unless a clear has
// made them stale), and empties it. The record is memory any process of the
// region may have written: only objects of the pool's chunks are touched.
// REQUIRES: the record's slot holder is dead and the slot not yet reused.
void pool_return_record(const Region& r, PoolState& s, PoolCacheRecord* record);
// Frees every object and chunk; the next allocation fixes the size anew.
// REQUIRES: no other call on the pool runs meanwhile (Vmalloc's vmclear).
void pool_clear(const Region& r, PoolState& s, ChunkSource& chunks);
PoolStats pool_stats(const Region& r, const PoolState& s);

}  // namespace memd::heap
