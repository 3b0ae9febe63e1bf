// Where the pool and last methods (Vmalloc's Vmpool and Vmlast) get their
// memory: chunks that are objects of the region's best heap, each one huge
// run of pages. A chunk outlives the process that made it, any process may
// find it from a pointer into it (the run's page descriptor), and recovery
// keeps it like any other object.
#pragma once

#include <cstddef>
#include <cstdint>

#include "heap/layout.h"

namespace memd::heap {

// Smallest chunk: past medium_max and large_max of every valid parameter
// set, so a chunk is always a huge run and starts on its run's first page.
inline constexpr size_t kMinMethodChunk = size_t{128} << 10;

class ChunkSource {
 public:
  virtual ~ChunkSource() = default;
  // `bytes` (a multiple of the page size, at least kMinMethodChunk) of
  // memory that stays the region's until free_chunk; nullptr and errno.
  virtual char* alloc_chunk(size_t bytes) = 0;
  virtual void free_chunk(char* chunk) = 0;
};

// The first page of the huge run that holds p, and its length in *bytes;
// nullptr if p is not inside a huge run of the region.
inline char* huge_run_of(const Region& r, const void* p, size_t* bytes) {
  if (!r.contains(p)) return nullptr;
  uint32_t page = static_cast<uint32_t>(r.offset_of(p) >> kPageShift);
  if (page >= r.committed_pages()) return nullptr;
  PageDesc d = r.page(PageIndex{page});
  if (d.kind != PageKind::kHuge || d.block > page) return nullptr;
  size_t run = r.block(PageIndex{d.block}).pages.bytes();
  if (run > r.data_bytes - (size_t{d.block} << kPageShift)) return nullptr;  // a length clients overwrote
  *bytes = run;
  return r.page_address(PageIndex{d.block});
}

// A chunk's mark: its kind mixed with its offset and the region's secret, so
// that a stale chunk, one of the other method, or bytes that only look like
// a header do not pass for a chunk.
inline uint64_t chunk_mark(const Region& r, uint64_t kind, const void* chunk) {
  return kind ^ r.secret ^ (r.offset_of(chunk) * 0x9e3779b97f4a7c15ull);
}

inline constexpr size_t round16(size_t n) { return (n + 15) & ~size_t{15}; }

// Gives back a method's list of chunks (at clear), newest first from `link`
// (offset + 1). `find(offset)` returns the chunk there if it is one of the
// method's (a Chunk with `mark` and `next`), else nullptr: a link it refuses
// ends the walk, and what follows leaks (a list another process broke).
template <class Find>
void free_chunk_list(const Region& r, uint64_t link, ChunkSource& source, Find find) {
  for (uint32_t seen = 0; link != 0 && seen < r.data_pages; ++seen) {
    auto* c = find(link - 1);
    if (c == nullptr) break;
    link = c->next;
    c->mark = 0;
    source.free_chunk(reinterpret_cast<char*>(c));
  }
}

}  // namespace memd::heap
