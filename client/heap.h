// memd::Heap, the C++ API: Vmalloc's region calls (alloc, free, resize,
// clear, compact, stat, addr, size) over a Vam page heap. Each thread
// allocates from its own blocks without locks; any thread may free any
// object. Data-plane calls report failure as nullptr and errno; creation and
// checks return absl::Status.
//
// A Heap runs Vmalloc's best method. A private heap under another method
// (pool, last, debug, profile) is a private region:
// Region::create_private(RegionOptions{.method = Method::kDebug}).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "heap/counter_snapshot.h"
#include "heap/params.h"
#include "heap/region_stats.h"
#include "region/arena_handle.h"

namespace memd {

struct HeapOptions {
  size_t reserve_bytes = size_t{4} << 30;  // address space; committed as used
  uint32_t max_threads = 256;
  heap::HeapParams params;
};

using HeapStats = heap::RegionStats;

// Vmalloc's resize flags.
enum ResizeFlags : unsigned {
  kResizeMove = 1,   // may move the object (else: in place or fail)
  kResizeCopy = 2,   // when moving, copy the contents
  kResizeClear = 4,  // zero the bytes past the old size
};

class Heap {
 public:
  static absl::StatusOr<std::unique_ptr<Heap>> create(const HeapOptions& options = {});
  // The heap malloc uses when the shim is preloaded.
  static Heap& process();
  ~Heap();
  Heap(const Heap&) = delete;
  Heap& operator=(const Heap&) = delete;

  void* alloc(size_t size) noexcept;
  // Call-chain pools for alloc (region/chain_pools.h, the DPA paper): the
  // small objects of each busy call chain, found from alloc's caller and
  // lengthened past wrappers, come from blocks of their own, so a structure
  // built by one chain is laid out apart from the rest. Turns the process's
  // chain classifier on with its defaults if it is off (the shim's
  // MEMD_CHAIN_POOLS sets its own). Set it before other threads allocate.
  void set_chain_pools(bool on) noexcept;
  // alloc for a wrapper's caller: with call-chain pools, the chain starts at
  // `caller` (the wrapper's return address; `caller_cfa`, the wrapper's
  // canonical frame address), not at the wrapper (the C API's entry points).
  void* alloc_as(size_t size, const void* caller, const void* caller_cfa) noexcept;
  void* alloc_aligned(size_t size, size_t align) noexcept;  // align: a power of two
  void* alloc_zeroed(size_t size) noexcept;
  // n objects of `size` into out[0..n), faster than n calls of alloc (one
  // thread-heap and class lookup; a block's free list drained in a loop).
  // Returns how many it made: fewer than n only when memory runs out
  // (errno ENOMEM); out[got..n) is left alone.
  size_t alloc_batch(size_t n, size_t size, void** out) noexcept;
  // Allocation hints (TP/Medius): an object of `size` within `near_bytes`
  // of `hint` when the hint's block (this thread's, of the size's class)
  // has a free one there; else what alloc gives. kNearBlock: anywhere in
  // the hint's block. A bad or foreign hint is only a slower miss.
  static constexpr size_t kNearLine = 64, kNearPage = 4096, kNearBlock = SIZE_MAX;
  void* alloc_near(size_t size, const void* hint, size_t near_bytes = kNearPage) noexcept;
  // free of each of p[0..n) (nullptr entries skipped; bad ones reported and
  // ignored, as free does).
  void free_batch(void* const* p, size_t n) noexcept;
  // nullptr is a no-op. A pointer this heap did not hand out, or a double
  // free, is reported on stderr and ignored (or aborts, see options.h).
  void free(void* p) noexcept;
  // p == nullptr allocates; size == 0 frees and returns nullptr. nullptr
  // and errno on failure, with p untouched.
  void* resize(void* p, size_t size, unsigned flags = kResizeMove | kResizeCopy) noexcept;

  // Frees every object. REQUIRES: no other thread uses the heap meanwhile.
  void clear();
  // Returns free memory to the system: the calling thread's empty blocks and
  // every empty page.
  void compact();
  // Space in use. An object another thread freed may count as busy until
  // that thread's next allocation slow path or exit (its remote frees go to
  // the object's block in batches); the calling thread's own count as free.
  HeapStats stat();
  // What its thread heaps did (telemetry): allocations and frees per size
  // class, cumulative since the heap was made.
  heap::CounterSnapshot counters() const;
  // OK, or an INTERNAL error naming the first broken invariant.
  absl::Status check();

  // If p points into a live object, that object's start; else nullptr.
  // Walks the block's free lists: exact when no other thread frees into that
  // block meanwhile (a debugging call, like Vmalloc's vmaddr).
  void* addr(const void* p) const;
  // The usable size of the live object starting at p; 0 if p is not one
  // (the checks free makes: safe while other threads work on the heap).
  size_t size(const void* p) const;
  bool contains(const void* p) const;

 private:
  Heap(region::ArenaHandle handle, bool owned) : handle_(handle), owned_(owned) {}
  void flush_own_remote_frees();
  // alloc with chain pools; tail-called by alloc, so that its own return
  // address and frame are alloc's caller's call.
  __attribute__((noinline)) void* alloc_by_chain(size_t size) noexcept;

  region::ArenaHandle handle_;
  bool owned_;
  bool chain_pools_ = false;
};

}  // namespace memd
