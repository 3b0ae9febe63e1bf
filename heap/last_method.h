// Vmalloc's last method: bump allocation in chunks (method_chunks.h); only
// the most recent object may be freed or resized in place, and clear frees
// everything at once: parsers, compilers, per-request arenas.
//
// The whole state is one 64-bit word, `top << 24 | last`: the offset of the
// next free byte and the size of the most recent object, both in 16-byte
// units. alloc, and free or resize of the most recent object, are one CAS
// of it; the chunk that holds the top is found from the top's page
// descriptor. Lock-free and shared by every process of the region.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "heap/method_chunks.h"
#include "heap/pool_method.h"

namespace memd::heap {

inline constexpr size_t kLastChunkBytes = size_t{256} << 10;

struct alignas(64) LastState {
  std::atomic<uint64_t> top;     // (next free byte / 16) << 24 | (last object's bytes / 16); 0: no chunk
  std::atomic<uint64_t> chunks;  // offset + 1 of the newest chunk, 0: none
  std::atomic<uint64_t> ignored_frees;  // frees of an object that was not the last one
  std::atomic<uint64_t> clears;
};

struct LastStats {
  uint64_t chunks = 0;
  uint64_t chunk_bytes = 0;
  uint64_t used_bytes = 0;   // up to the top in each chunk
  uint64_t ignored_frees = 0;
};

// `align`: a power of two up to the page size. nullptr and errno (ENOMEM).
void* last_alloc(const Region& r, LastState& s, ChunkSource& chunks, size_t size, size_t align);
// The most recent object is freed; any other object of the method is left
// to clear (kIgnored, counted), as Vmalloc's Vmlast does.
MethodFree last_free(const Region& r, LastState& s, void* p);
// The most recent object grows or shrinks in place when its chunk has room;
// anything else moves to a new object (its old space waits for clear).
// nullptr and errno (EINVAL: p is not in a chunk of the method; ENOMEM).
void* last_resize(const Region& r, LastState& s, ChunkSource& chunks, void* p, size_t size);
// The most recent object's bytes; 0 for any other pointer (the method keeps
// no sizes).
size_t last_size(const Region& r, const LastState& s, const void* p);
// REQUIRES: no other call on the method runs meanwhile.
void last_clear(const Region& r, LastState& s, ChunkSource& chunks);
LastStats last_stats(const Region& r, const LastState& s);

}  // namespace memd::heap
