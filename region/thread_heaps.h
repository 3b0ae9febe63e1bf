// Binds threads to arenas: each thread gets its own thread heap (ThreadHeap)
// in each arena it uses, found through a thread-local table indexed by arena
// id. A generation per entry makes a destroyed arena's entries stale instead
// of dangling. When a thread exits, a pthread key destructor hands its blocks
// back (released if empty, else abandoned for adoption).
#pragma once

#include <cstdint>

#include "region/arena.h"
#include "region/arena_handle.h"
#include "region/thread_heap_host.h"
#include "heap/thread_heap.h"

namespace memd::region {

inline constexpr uint32_t kMaxArenas = 64;

struct ThreadHeapEntry {
  uint32_t generation;
  heap::ThreadHeap* heap;
};

// The calling thread's entries. Plain __thread (no constructor): no TLS
// wrapper call on the fast path, and usable from inside malloc before any
// constructor has run. Initial-exec, so only 24 bytes of it: libmemd.so is
// also loaded with dlopen (Python's ctypes), where initial-exec TLS comes
// from glibc's small static surplus (512 bytes promised); the table for
// the other arenas is mapped per thread on its first attach instead.
struct ThreadHeapTable {
  ThreadHeapEntry entries[kMaxArenas];
};
extern __thread ThreadHeapEntry tl_process_heap __attribute__((tls_model("initial-exec")));
extern __thread ThreadHeapTable* tl_region_heaps __attribute__((tls_model("initial-exec")));

// The last region heap this thread found, named by its registration's
// generation (never given twice in a process; never 0 or kNoRegionHeap). A
// region's fast paths compare one word with it instead of indexing the
// table; every change of an entry keeps it true (a cleared entry clears
// it). Empty, it holds kNoRegionHeap, which no key asks for, so a match
// always has a heap.
inline constexpr uint32_t kNoRegionHeap = ~uint32_t{0};
struct LastRegionHeap {
  uint32_t generation;
  heap::ThreadHeap* heap;
};
extern __thread LastRegionHeap tl_last_region_heap __attribute__((tls_model("initial-exec")));

// Whether this thread's last region heap is the one of `generation`; then
// last_region_heap() gives it. If not, the caller's slow path finds it (and
// remembers it). 0 (a region whose calls all take the slow path) is never.
__attribute__((always_inline)) inline bool have_last_region_heap(uint32_t generation) {
  return tl_last_region_heap.generation == generation;
}
__attribute__((always_inline)) inline heap::ThreadHeap* last_region_heap() { return tl_last_region_heap.heap; }
inline void remember_region_heap(uint32_t generation, heap::ThreadHeap* h) { tl_last_region_heap = {generation, h}; }

// Id 0 belongs to the process arena, which is never destroyed: the malloc
// shim reads tl_process_heap.heap without a generation check.
inline constexpr uint32_t kProcessArenaId = 0;

// This thread's entry for arena `id`; nullptr if it has none yet.
inline ThreadHeapEntry* thread_heap_entry(uint32_t id) {
  if (id == kProcessArenaId) return &tl_process_heap;
  ThreadHeapTable* table = tl_region_heaps;
  return table != nullptr ? &table->entries[id] : nullptr;
}

// Gives the arena an id (kProcessArenaId if `process`); false (errno EMFILE)
// if no id is free.
bool register_arena(Arena* arena, ArenaHandle* out, bool process = false);
// The same for any host (a shared region).
bool register_host(ThreadHeapHost* host, ArenaHandle* out);
// Forgets the arena; threads' entries for it become stale.
void unregister_arena(const ArenaHandle& handle);

// The calling thread's heap in the arena, attaching one if needed; nullptr
// (errno set) if none can be had (ENOMEM: no page for the thread's table).
heap::ThreadHeap* attach_thread_heap(const ArenaHandle& handle);
// The calling thread's heap in the arena if it has one now; nullptr
// otherwise (no call: for fast paths that leave everything else to others).
inline heap::ThreadHeap* thread_heap_if_attached(const ArenaHandle& handle) {
  const ThreadHeapEntry* e = thread_heap_entry(handle.id);
  return __builtin_expect(e != nullptr && e->generation == handle.generation, 1) ? e->heap : nullptr;
}
inline heap::ThreadHeap* thread_heap(const ArenaHandle& handle) {
  const ThreadHeapEntry* e = thread_heap_entry(handle.id);
  if (__builtin_expect(e != nullptr && e->generation == handle.generation, 1)) return e->heap;
  return attach_thread_heap(handle);
}
// The same, remembered as the last region heap (for the slow paths behind
// last_region_heap).
inline heap::ThreadHeap* thread_heap_remembered(const ArenaHandle& handle) {
  heap::ThreadHeap* h = thread_heap(handle);
  if (h != nullptr && handle.id != kProcessArenaId) remember_region_heap(handle.generation, h);
  return h;
}
// The calling thread's heap if it has one, else the arena's stranger (for
// frees); the thread's own is remembered as the last region heap.
inline heap::ThreadHeap* thread_heap_or_stranger(const ArenaHandle& handle) {
  const ThreadHeapEntry* e = thread_heap_entry(handle.id);
  if (__builtin_expect(e != nullptr && e->generation == handle.generation && e->heap != nullptr, 1)) {
    if (handle.id != kProcessArenaId) remember_region_heap(handle.generation, e->heap);
    return e->heap;
  }
  return handle.host->stranger();
}

// Detaches the calling thread from one arena now (before the arena goes).
void detach_thread_heap(const ArenaHandle& handle);

}  // namespace memd::region
