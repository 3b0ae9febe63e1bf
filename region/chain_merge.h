// Object-group merging after the DPA paper (../shared/seeds, section 3.2):
// the pools of several call chains whose objects form one structure -- a
// list whose nodes two functions insert -- are merged into one pool, so the
// structure is laid out in one run of blocks again instead of one per chain.
//
// The paper builds a storage shape graph (SSG) from a points-to analysis of
// the binary: heap nodes are object groups, an edge (g, h, offset) says that
// the word at `offset` of g's objects points into h's. Two groups merge when
// their objects are of one type (the paper, too, takes one size for one
// type) and
//   type I:  an edge joins them (a node pointing to a node like itself), or
//   type II: edges at the same offset lead from one group to both (the
//            children of one parent type, allocated at different sites).
//
// Here the graph is learnt at run time instead: one grouped allocation in
// kObserveEvery scans the object its chain's pool handed out before (by now
// written) for words that point into blocks of this thread's pools, and each
// (group, offset) slot keeps the group it points to by a majority vote. An
// edge seen kEdgeHits times decides a merge. Merging is a union of groups:
// chain_pool_for answers the surviving group from then on, and the merged
// group's blocks serve the frees of what they hold until they empty.
//
// Process-wide, like the chain table; allocation-free (it runs inside malloc).
#pragma once

#include <cstdint>

#include "heap/thread_heap.h"

namespace memd::region {

inline constexpr uint32_t kObserveEvery = 16;
inline constexpr uint32_t kEdgeHits = 4;
// Words of an object scanned for pointers: the pools' objects are at most
// ThreadHeap::kChainGroupMaxSize bytes.
inline constexpr uint32_t kEdgeWords = heap::ThreadHeap::kChainGroupMaxSize / 8;

// Whether merging is on (ChainPoolOptions::merge_groups); set once, at enable.
void chain_merge_enable(bool on);
// Group `group` was given to a chain whose objects are `granules` 8-byte
// units (called under the chain table's lock, before any allocation of it).
void chain_merge_group_given(uint32_t group, uint32_t granules);

// After each allocation `p` of pool `group` (a surviving one, as
// chain_pool_for answers) from this thread's heap `h`.
void chain_merge_allocated(heap::ThreadHeap* h, uint32_t group, void* p);

// The group `group` was merged into, or itself.
uint32_t chain_merge_root(uint32_t group);
// Groups merged into another so far, by type.
struct ChainMergeStats {
  uint64_t type_one = 0;
  uint64_t type_two = 0;
  uint64_t scans = 0;  // objects scanned for pointers
};
ChainMergeStats chain_merge_stats();

}  // namespace memd::region
