#include "heap/last_method.h"

#include <cerrno>
#include <cstring>

namespace memd::heap {
namespace {

inline constexpr uint64_t kLastChunkKind = 0x6c6173742d63686bull;  // "last-chk"
inline constexpr size_t kChunkHeader = 64;  // objects start 64-aligned in a chunk
inline constexpr uint64_t kLastBits = 24;
inline constexpr uint64_t kMaxLastUnits = (uint64_t{1} << kLastBits) - 1;

struct LastChunk {
  uint64_t mark;  // chunk_mark(kLastChunkKind)
  uint64_t next;  // offset + 1 of the next older chunk
};

uint64_t top_of(uint64_t w) { return (w >> kLastBits) * 16; }
uint64_t last_bytes_of(uint64_t w) { return (w & kMaxLastUnits) * 16; }
// A last object too big for the field is recorded as none: it stays until clear.
uint64_t word(uint64_t top, uint64_t last_bytes) {
  uint64_t units = last_bytes / 16;
  return (top / 16) << kLastBits | (units > kMaxLastUnits ? 0 : units);
}

// The chunk holding data offset `off` and its end offset, if it is one of
// this method's chunks.
LastChunk* chunk_holding(const Region& r, uint64_t off, uint64_t* end) {
  if (off >= r.data_bytes) return nullptr;
  size_t run = 0;
  char* start = huge_run_of(r, r.data + off, &run);
  if (start == nullptr) return nullptr;
  auto* c = reinterpret_cast<LastChunk*>(start);
  if (c->mark != chunk_mark(r, kLastChunkKind, c)) return nullptr;
  *end = r.offset_of(start) + run;
  return c;
}

// The chunk that starts at data offset `off`, if it is one of the method's,
// and its end offset.
LastChunk* chunk_starting(const Region& r, uint64_t off, uint64_t* end) {
  LastChunk* c = chunk_holding(r, off, end);
  return c != nullptr && r.offset_of(c) == off ? c : nullptr;
}

uint64_t align_up(uint64_t v, uint64_t align) { return (v + align - 1) & ~(align - 1); }

LastChunk* make_chunk(const Region& r, LastState& s, ChunkSource& source, size_t need) {
  size_t bytes = (kChunkHeader + need + kPageSize - 1) & ~(kPageSize - 1);
  if (bytes < kLastChunkBytes) bytes = kLastChunkBytes;
  char* p = source.alloc_chunk(bytes);
  if (p == nullptr) return nullptr;
  auto* c = reinterpret_cast<LastChunk*>(p);
  c->mark = chunk_mark(r, kLastChunkKind, c);
  uint64_t link = r.offset_of(c) + 1;
  uint64_t head = s.chunks.load(std::memory_order_relaxed);
  do {
    c->next = head;
  } while (!s.chunks.compare_exchange_weak(head, link, std::memory_order_release, std::memory_order_relaxed));
  return c;
}

}  // namespace

void* last_alloc(const Region& r, LastState& s, ChunkSource& source, size_t size, size_t align) {
  if (align < 16) align = 16;
  if (size > r.data_bytes || align > kPageSize) {
    errno = size > r.data_bytes ? ENOMEM : EINVAL;
    return nullptr;
  }
  size_t stride = round16(size == 0 ? 1 : size);
  uint64_t w = s.top.load(std::memory_order_acquire);
  for (;;) {
    uint64_t top = top_of(w), end = 0;
    if (top != 0 && chunk_holding(r, top - 1, &end) != nullptr) {
      uint64_t at = align_up(top, align);
      if (at <= end && end - at >= stride) {
        if (s.top.compare_exchange_weak(w, word(at + stride, stride), std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
          return r.data + at;
        }
        continue;
      }
    }
    // No room: a new chunk becomes the top's. Another thread may install
    // one first; then this one stays on the list, empty, until clear.
    LastChunk* c = make_chunk(r, s, source, stride + align);
    if (c == nullptr) {
      errno = ENOMEM;
      return nullptr;
    }
    uint64_t at = align_up(r.offset_of(c) + kChunkHeader, align);
    if (s.top.compare_exchange_strong(w, word(at + stride, stride), std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      return r.data + at;
    }
  }
}

MethodFree last_free(const Region& r, LastState& s, void* p) {
  if (!r.contains(p)) return MethodFree::kNotObject;
  uint64_t off = r.offset_of(p);
  uint64_t w = s.top.load(std::memory_order_acquire);
  while (last_bytes_of(w) != 0 && top_of(w) - last_bytes_of(w) == off) {
    if (s.top.compare_exchange_weak(w, word(off, 0), std::memory_order_acq_rel, std::memory_order_acquire)) {
      return MethodFree::kOk;
    }
  }
  uint64_t end = 0;
  if (chunk_holding(r, off, &end) == nullptr || off % 16 != 0) return MethodFree::kNotObject;
  s.ignored_frees.fetch_add(1, std::memory_order_relaxed);
  return MethodFree::kIgnored;
}

void* last_resize(const Region& r, LastState& s, ChunkSource& source, void* p, size_t size) {
  if (!r.contains(p)) {
    errno = EINVAL;
    return nullptr;
  }
  uint64_t off = r.offset_of(p), end = 0;
  LastChunk* c = chunk_holding(r, off, &end);
  if (c == nullptr || off % 16 != 0 || off < r.offset_of(c) + kChunkHeader) {
    errno = EINVAL;
    return nullptr;
  }
  size_t stride = round16(size == 0 ? 1 : size);
  uint64_t w = s.top.load(std::memory_order_acquire);
  uint64_t copy = 0;  // bytes the old object may hold
  while (last_bytes_of(w) != 0 && top_of(w) - last_bytes_of(w) == off) {
    copy = last_bytes_of(w);
    if (end - off < stride) break;  // no room in place
    if (s.top.compare_exchange_weak(w, word(off + stride, stride), std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
      return p;
    }
  }
  if (copy == 0) {
    // Not the last object: its size is not kept. It ends before the top if
    // the top is in its chunk, else at most at the chunk's end.
    uint64_t top = top_of(w);
    copy = (top > off && top <= end) ? top - off : end - off;
  }
  void* q = last_alloc(r, s, source, size, 16);
  if (q != nullptr) std::memcpy(q, p, copy < size ? copy : size);
  return q;
}

size_t last_size(const Region& r, const LastState& s, const void* p) {
  if (!r.contains(p)) return 0;
  uint64_t w = s.top.load(std::memory_order_acquire);
  uint64_t bytes = last_bytes_of(w);
  return bytes != 0 && top_of(w) - bytes == r.offset_of(p) ? bytes : 0;
}

void last_clear(const Region& r, LastState& s, ChunkSource& source) {
  s.top.store(0, std::memory_order_release);
  uint64_t end = 0;
  free_chunk_list(r, s.chunks.exchange(0, std::memory_order_acq_rel), source, [&](uint64_t off) {
    return chunk_starting(r, off, &end);
  });
  s.clears.fetch_add(1, std::memory_order_relaxed);
}

LastStats last_stats(const Region& r, const LastState& s) {
  LastStats out;
  out.ignored_frees = s.ignored_frees.load(std::memory_order_relaxed);
  uint64_t top = top_of(s.top.load(std::memory_order_acquire));
  uint64_t link = s.chunks.load(std::memory_order_acquire);
  for (uint32_t seen = 0; link != 0 && seen < r.data_pages; ++seen) {
    uint64_t start = link - 1, end = 0;
    LastChunk* c = chunk_starting(r, start, &end);
    if (c == nullptr) break;
    out.chunks += 1;
    out.chunk_bytes += end - start;
    out.used_bytes += (top > start && top <= end) ? top - start : end - start;
    link = c->next;
  }
  return out;
}

}  // namespace memd::heap
