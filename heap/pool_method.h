// Vmalloc's pool method: objects of one size, fixed by the first allocation
// after the region is made or cleared. Objects carry no header; each chunk
// (method_chunks.h) starts with a bitmap of its live objects, so that
//
//   alloc: claim a clear bit of a chunk with room (one fetch_or)
//   free:  find the chunk from the pointer's page descriptor, clear the bit
//          (one fetch_and); a bit already clear is a double free
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
  std::atomic<uint32_t> room;    // 1: a free gave a full chunk room since the last scan
  std::atomic<uint32_t> pad;
  std::atomic<uint64_t> clears;  // clears since creation
};

struct PoolStats {
  uint64_t object_size = 0;  // the fixed request size, 0: not fixed yet
  uint64_t stride = 0;       // bytes each object takes
  uint64_t chunks = 0;
  uint64_t live = 0;         // objects allocated and not freed
  uint64_t capacity = 0;     // objects the chunks hold
  uint64_t chunk_bytes = 0;
};

enum class MethodFree { kOk, kNotObject, kDoubleFree, kIgnored };

// nullptr and errno: EINVAL for a size other than the pool's (or 0 when
// the first size is not fixed yet), ENOMEM when no chunk can be had.
void* pool_alloc(const Region& r, PoolState& s, ChunkSource& chunks, size_t size);
MethodFree pool_free(const Region& r, PoolState& s, void* p);
// Whether p is a live object of the pool, and its usable size (0: not one).
size_t pool_size(const Region& r, const PoolState& s, const void* p);
// Frees every object and chunk; the next allocation fixes the size anew.
// REQUIRES: no other call on the pool runs meanwhile (Vmalloc's vmclear).
void pool_clear(const Region& r, PoolState& s, ChunkSource& chunks);
PoolStats pool_stats(const Region& r, const PoolState& s);

}  // namespace memd::heap
