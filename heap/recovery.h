// Bringing a region back after a crash. Everything the heap can derive is
// rebuilt from what each write made durable first:
//
//  - A block is in use iff its first page's descriptor says so and every
//    other page of it agrees (page_heap.cc writes the first page last when it
//    hands a block out, and first when it takes one back). Everything else
//    below the committed mark is free: free runs, bins, the LRU and the
//    counters are rebuilt from the gaps.
//  - A segregated block's objects are live unless they are past the bump
//    pointer or on one of its free lists; a block whose `end` is 0 never held
//    an object (block_init writes `end` last). Counts are recomputed; a list
//    that leaves its block, repeats or is misaligned is cut where it goes
//    wrong (what is cut off leaks).
//  - A large block's chunks are walked from its start; a chunk that is not
//    busy is free. A walk that goes wrong turns the rest of the block into
//    one free chunk.
//  - A huge run whose owner word is set was being freed or cached: free.
//
// A crash therefore leaks at most the objects in flight (an allocation not
// yet published, a free not yet linked, a remote-free batch being moved), and
// never leaves two live objects overlapping.
//
// REQUIRES: the caller is the page-heap owner and no process uses the blocks
// being repaired (their owners are dead). Frees by other live processes into
// them are safe: remote lists are taken with one exchange.
#pragma once

#include <cstdint>

#include "heap/layout.h"
#include "heap/memory_source.h"
#include "heap/size_class.h"

namespace memd::heap {

struct RecoveryReport {
  uint32_t blocks_live = 0;      // blocks holding objects, now ownerless
  uint32_t blocks_kept = 0;      // blocks of live leases, left untouched
  uint32_t blocks_released = 0;  // blocks found empty and freed
  uint32_t huge_live = 0;
  uint32_t free_runs = 0;
  uint64_t leaked_objects = 0;   // cut from broken lists or chunk walks
};

// Makes an ownerless segregated or large block consistent again: recounts
// `used`, merges its remote list, repairs its lists or chunks. Returns true
// if the block holds no live object.
bool block_repair(const Region& r, const SizeClasses& classes, PageIndex block, uint64_t* leaked);

// Rebuilds the page heap and every block of a region whose owner crashed, and
// frees every owner and lease slot. Free gaps are discarded through `source`
// (they may hold stale pages). Calls keep(block) for every block that still
// holds objects (the caller lists it as abandoned).
//
// `live_leases` (max_clients flags, or nullptr) names lease slots whose
// processes still run and will come back to the next owner: their lease
// slots, the owner slots they hold and every block owned through those
// slots are left exactly as they are (those processes may be using them this
// very moment); only the page heap counts their pages in use.
template <class Keep>
void region_recover(const Region& r, const SizeClasses& classes, MemorySource& source, Keep keep,
                    RecoveryReport* report, const uint8_t* live_leases = nullptr);

// Takes back everything held by owner slots tagged `holder` (a dead client):
// closes and frees the slots, disowns their blocks, repairs them, frees the
// empty ones and huge runs they were caching. Calls keep(block) for blocks
// with live objects. Returns the number of blocks taken back.
template <class Keep>
uint32_t reclaim_holder(const Region& r, const SizeClasses& classes, uint32_t holder, uint32_t now_ms,
                        Keep keep, uint64_t* leaked);

// --- implementation helpers (recovery.cc) ---
namespace recovery_detail {
using KeepFn = void (*)(void* ctx, PageIndex block);
void recover(const Region& r, const SizeClasses& classes, MemorySource& source, KeepFn keep, void* ctx,
             RecoveryReport* report, const uint8_t* live_leases);
uint32_t reclaim(const Region& r, const SizeClasses& classes, uint32_t holder, uint32_t now_ms,
                 KeepFn keep, void* ctx, uint64_t* leaked);
}  // namespace recovery_detail

template <class Keep>
void region_recover(const Region& r, const SizeClasses& classes, MemorySource& source, Keep keep,
                    RecoveryReport* report, const uint8_t* live_leases) {
  recovery_detail::recover(
      r, classes, source, [](void* ctx, PageIndex b) { (*static_cast<Keep*>(ctx))(b); }, &keep, report,
      live_leases);
}

template <class Keep>
uint32_t reclaim_holder(const Region& r, const SizeClasses& classes, uint32_t holder, uint32_t now_ms,
                        Keep keep, uint64_t* leaked) {
  return recovery_detail::reclaim(
      r, classes, holder, now_ms, [](void* ctx, PageIndex b) { (*static_cast<Keep*>(ctx))(b); }, &keep,
      leaked);
}

}  // namespace memd::heap
