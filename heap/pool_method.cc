#include "heap/pool_method.h"

#include <cerrno>
#include <cstring>

namespace memd::heap {
namespace {

inline constexpr uint64_t kPoolChunkKind = 0x706f6f6c2d63686bull;  // "pool-chk"
inline constexpr uint32_t kBitmapWords = kPoolMaxObjectsPerChunk / 64;

struct PoolChunk {
  uint64_t mark;    // chunk_mark(kPoolChunkKind): set last when made, cleared when freed
  uint64_t next;    // offset + 1 of the next older chunk, 0: none
  uint32_t stride;  // bytes per object
  uint32_t count;   // objects
  std::atomic<uint32_t> used;  // bits set
  uint32_t pad0;
  uint64_t pad1[4];
  std::atomic<uint64_t> bits[kBitmapWords];  // 1: allocated (or past `count`)
};
static_assert(offsetof(PoolChunk, bits) == 64);
inline constexpr size_t kObjectsAt = sizeof(PoolChunk);  // 576: objects are 16-aligned
static_assert(kObjectsAt % 16 == 0);

char* objects_of(PoolChunk* c) { return reinterpret_cast<char*>(c) + kObjectsAt; }

size_t stride_for(size_t size) { return round16(size == 0 ? 1 : size); }

size_t chunk_bytes_for(size_t stride) {
  size_t want = kObjectsAt + 8 * stride;  // at least 8 objects
  size_t bytes = (want + kPageSize - 1) & ~(kPageSize - 1);
  return bytes < kMinMethodChunk ? kMinMethodChunk : bytes;
}

// The chunk at data offset `off` if it is one of this pool's chunks of
// `stride`-byte objects (bounded by its run: every field is memory another
// process may have written), else nullptr.
PoolChunk* chunk_at(const Region& r, uint64_t off, size_t stride) {
  if (off >= r.data_bytes || off % kPageSize != 0) return nullptr;
  char* p = r.data + off;
  size_t run = 0;
  if (huge_run_of(r, p, &run) != p) return nullptr;
  auto* c = reinterpret_cast<PoolChunk*>(p);
  if (c->mark != chunk_mark(r, kPoolChunkKind, c) || c->stride != stride || c->count == 0 ||
      c->count > kPoolMaxObjectsPerChunk || kObjectsAt + size_t{c->count} * stride > run) {
    return nullptr;
  }
  return c;
}

// Where a thread starts looking in a chunk's bitmap: spread over the words
// so that threads do not all fight over the first.
uint32_t start_word(uint32_t words) {
  static thread_local char here;
  return static_cast<uint32_t>((reinterpret_cast<uintptr_t>(&here) >> 12) % words);
}

void* take_from(PoolChunk* c) {
  if (c->used.load(std::memory_order_relaxed) >= c->count) return nullptr;
  uint32_t words = (c->count + 63) / 64;
  uint32_t first = start_word(words);
  for (uint32_t i = 0; i < words; ++i) {
    uint32_t w = first + i < words ? first + i : first + i - words;
    uint64_t bits = c->bits[w].load(std::memory_order_relaxed);
    while (bits != ~uint64_t{0}) {
      uint64_t bit = uint64_t{1} << __builtin_ctzll(~bits);
      uint64_t old = c->bits[w].fetch_or(bit, std::memory_order_acquire);
      if ((old & bit) == 0) {
        c->used.fetch_add(1, std::memory_order_relaxed);
        return objects_of(c) + (size_t{w} * 64 + static_cast<size_t>(__builtin_ctzll(bit))) * c->stride;
      }
      bits = old | bit;
    }
  }
  return nullptr;
}

PoolChunk* make_chunk(const Region& r, ChunkSource& source, size_t stride) {
  size_t bytes = chunk_bytes_for(stride);
  char* p = source.alloc_chunk(bytes);
  if (p == nullptr) return nullptr;
  auto* c = reinterpret_cast<PoolChunk*>(p);
  size_t count = (bytes - kObjectsAt) / stride;
  if (count > kPoolMaxObjectsPerChunk) count = kPoolMaxObjectsPerChunk;
  c->next = 0;
  c->stride = static_cast<uint32_t>(stride);
  c->count = static_cast<uint32_t>(count);
  c->used.store(0, std::memory_order_relaxed);
  for (uint32_t w = 0; w < kBitmapWords; ++w) {
    size_t lo = size_t{w} * 64;
    uint64_t past = lo >= count ? ~uint64_t{0} : (count - lo >= 64 ? 0 : ~uint64_t{0} << (count - lo));
    c->bits[w].store(past, std::memory_order_relaxed);
  }
  c->mark = chunk_mark(r, kPoolChunkKind, c);
  return c;
}

// Pushes a fresh chunk on the pool's list (published with release: a
// process that finds it sees its header).
void link_chunk(const Region& r, PoolState& s, PoolChunk* c) {
  uint64_t link = r.offset_of(c) + 1;
  uint64_t head = s.chunks.load(std::memory_order_relaxed);
  do {
    c->next = head;
  } while (!s.chunks.compare_exchange_weak(head, link, std::memory_order_release, std::memory_order_relaxed));
}

// Fixes the pool's size at `size` if none is fixed; false (EINVAL) if
// another size is.
bool agree_on_size(PoolState& s, size_t size) {
  uint64_t fixed = s.size.load(std::memory_order_acquire);
  if (fixed == 0 && size != 0) {
    if (s.size.compare_exchange_strong(fixed, size, std::memory_order_acq_rel)) return true;
  }
  if (fixed != size || size == 0) {
    errno = EINVAL;
    return false;
  }
  return true;
}

// The pool's position of `p`: its chunk and index, or nullptr.
PoolChunk* locate(const Region& r, const PoolState& s, const void* p, uint32_t* index) {
  size_t run = 0;
  char* start = huge_run_of(r, p, &run);
  uint64_t size = s.size.load(std::memory_order_acquire);
  if (start == nullptr || size == 0) return nullptr;
  size_t stride = stride_for(size);
  PoolChunk* c = chunk_at(r, r.offset_of(start), stride);
  if (c == nullptr) return nullptr;
  const char* at = static_cast<const char*>(p);
  if (at < objects_of(c)) return nullptr;
  size_t d = static_cast<size_t>(at - objects_of(c));
  if (d % stride != 0 || d / stride >= c->count) return nullptr;
  *index = static_cast<uint32_t>(d / stride);
  return c;
}

}  // namespace

void* pool_alloc(const Region& r, PoolState& s, ChunkSource& source, size_t size) {
  if (!agree_on_size(s, size)) return nullptr;
  size_t stride = stride_for(size);
  if (uint64_t h = s.hint.load(std::memory_order_acquire); h != 0) {
    if (PoolChunk* c = chunk_at(r, h - 1, stride)) {
      if (void* p = take_from(c)) return p;
    }
  }
  // The hint is full. Look through the chunks only when a free has given a
  // full one room since a look found none; else a new chunk is the answer.
  // The flag is cleared before the look (a free during it sets it again)
  // and set again when the look finds room: others may have room too.
  if (s.room.exchange(0, std::memory_order_acq_rel) != 0) {
    uint32_t seen = 0;
    for (uint64_t link = s.chunks.load(std::memory_order_acquire); link != 0 && seen < r.data_pages; ++seen) {
      PoolChunk* c = chunk_at(r, link - 1, stride);
      if (c == nullptr) break;  // a list another process broke: stop, make a new chunk
      if (void* p = take_from(c)) {
        s.hint.store(link, std::memory_order_release);
        s.room.store(1, std::memory_order_release);
        return p;
      }
      link = c->next;
    }
  }
  PoolChunk* c = make_chunk(r, source, stride);
  if (c == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  void* p = take_from(c);
  link_chunk(r, s, c);
  s.hint.store(r.offset_of(c) + 1, std::memory_order_release);
  return p;
}

MethodFree pool_free(const Region& r, PoolState& s, void* p) {
  uint32_t i = 0;
  PoolChunk* c = locate(r, s, p, &i);
  if (c == nullptr) return MethodFree::kNotObject;
  uint64_t bit = uint64_t{1} << (i % 64);
  uint64_t old = c->bits[i / 64].fetch_and(~bit, std::memory_order_release);
  if ((old & bit) == 0) return MethodFree::kDoubleFree;
  if (c->used.fetch_sub(1, std::memory_order_relaxed) == c->count) {
    // It was full: tell allocators it has room again.
    s.hint.store(r.offset_of(c) + 1, std::memory_order_release);
    s.room.store(1, std::memory_order_release);
  }
  return MethodFree::kOk;
}

size_t pool_size(const Region& r, const PoolState& s, const void* p) {
  uint32_t i = 0;
  PoolChunk* c = locate(r, s, p, &i);
  if (c == nullptr) return 0;
  bool live = (c->bits[i / 64].load(std::memory_order_acquire) >> (i % 64)) & 1;
  return live ? c->stride : 0;
}

void pool_clear(const Region& r, PoolState& s, ChunkSource& source) {
  uint64_t size = s.size.load(std::memory_order_acquire);
  uint64_t link = s.chunks.exchange(0, std::memory_order_acq_rel);
  s.hint.store(0, std::memory_order_release);
  s.room.store(0, std::memory_order_release);
  size_t stride = stride_for(size);
  for (uint32_t seen = 0; link != 0 && size != 0 && seen < r.data_pages; ++seen) {
    PoolChunk* c = chunk_at(r, link - 1, stride);
    if (c == nullptr) break;  // what follows a broken link leaks (check() still sees it as objects)
    link = c->next;
    c->mark = 0;
    source.free_chunk(reinterpret_cast<char*>(c));
  }
  s.size.store(0, std::memory_order_release);
  s.clears.fetch_add(1, std::memory_order_relaxed);
}

PoolStats pool_stats(const Region& r, const PoolState& s) {
  PoolStats out;
  out.object_size = s.size.load(std::memory_order_acquire);
  if (out.object_size == 0) return out;
  out.stride = stride_for(out.object_size);
  uint64_t link = s.chunks.load(std::memory_order_acquire);
  for (uint32_t seen = 0; link != 0 && seen < r.data_pages; ++seen) {
    PoolChunk* c = chunk_at(r, link - 1, out.stride);
    if (c == nullptr) break;
    out.chunks += 1;
    // Counted from the bitmap, which is exact: `used` is a hint that a
    // process killed between its two updates leaves one off.
    uint32_t words = (c->count + 63) / 64;
    for (uint32_t w = 0; w < words; ++w) {
      out.live += static_cast<uint64_t>(__builtin_popcountll(c->bits[w].load(std::memory_order_relaxed)));
    }
    out.live -= size_t{words} * 64 - c->count;  // the bits past `count`, set at creation
    out.capacity += c->count;
    out.chunk_bytes += chunk_bytes_for(out.stride);
    link = c->next;
  }
  return out;
}

}  // namespace memd::heap
