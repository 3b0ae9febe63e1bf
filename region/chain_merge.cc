#include "region/chain_merge.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>

#include "region/chain_pools.h"
#include "heap/block.h"
#include "heap/remote_free.h"

namespace memd::region {

namespace chain_pools_internal {
std::atomic<uint8_t> group_root[kGroupSlots] = {};
}  // namespace chain_pools_internal

namespace {

using chain_pools_internal::group_root;
using chain_pools_internal::kGroupSlots;
constexpr uint32_t kGroups = heap::ThreadHeap::kMaxChainGroups;
static_assert(kGroupSlots == kGroups + 1, "a root per group, and group 0 (none)");

// One slot of the learnt graph: the two groups the word at one offset of a
// group's objects points into most, with their votes. A third group takes a
// vote from the weaker candidate, and its place once it has none (a
// majority count with two candidates: a field that holds one group steadily,
// or two in turn, keeps them).
struct EdgeSlot {
  std::atomic<uint8_t> to[2] = {};
  std::atomic<uint8_t> votes[2] = {};
};

struct MergeState {
  std::atomic<bool> on{false};
  std::atomic<bool> lock{false};
  // Each pool's object size in 8-byte units: written once, when the pool is
  // given; atomic because a thread may learn of a pool from another's edge
  // before it has any other order with the pool's making.
  std::atomic<uint32_t> granules[kGroupSlots] = {};
  EdgeSlot edges[kGroupSlots][kEdgeWords];
  std::atomic<uint64_t> type_one{0}, type_two{0}, scans{0};
};
MergeState merge;

struct MergeGuard {
  MergeGuard() {
    while (merge.lock.exchange(true, std::memory_order_acquire)) sched_yield();
  }
  ~MergeGuard() { merge.lock.store(false, std::memory_order_release); }
};

// Per thread: the countdown to the next scan (the last object of each pool
// is the thread heap's, ThreadHeap::swap_last_grouped). Plain words: only
// this thread reads them.
struct Observed {
  uint32_t countdown = kObserveEvery;
  uint32_t draw = 0;
};

// The next countdown: kObserveEvery on average, drawn at random. A fixed
// period can keep in step with a program that allocates in a cycle (a
// child, its parent, a child...) and scan only one pool's objects.
uint32_t next_countdown(Observed& o) {
  o.draw = o.draw * 1664525u + 1013904223u;  // an LCG: its high bits
  return kObserveEvery / 2 + (o.draw >> 16) % kObserveEvery;
}
__thread Observed tl_observed __attribute__((tls_model("initial-exec")));

uint32_t root_of(uint32_t g) { return group_root[g].load(std::memory_order_relaxed); }
uint32_t granules_of(uint32_t g) { return merge.granules[g].load(std::memory_order_relaxed); }

// Under the lock: `from` (a root) and every group merged into it now answer
// `into` (a root of the same object size).
void merge_into(uint32_t from, uint32_t into) {
  for (uint32_t g = 1; g <= kGroups; ++g) {
    if (root_of(g) == from) group_root[g].store(static_cast<uint8_t>(into), std::memory_order_relaxed);
  }
}

enum class MergeType { kOne, kTwo };

// Merges the groups of roots a and b if they are still apart and their
// objects are of one size.
void try_merge(uint32_t a, uint32_t b, MergeType type) {
  MergeGuard g;
  uint32_t keep = root_of(a);
  uint32_t gone = root_of(b);
  // A size not seen yet (0) is no size: nothing merges on it.
  if (keep == gone || granules_of(keep) == 0 || granules_of(keep) != granules_of(gone)) return;
  merge_into(gone, keep);
  (type == MergeType::kTwo ? merge.type_two : merge.type_one).fetch_add(1, std::memory_order_relaxed);
}

// The word at `word` of an object of root `from` points into root `to`
// once more; merges where the paper's rules say.
void record_edge(uint32_t from, uint32_t word, uint32_t to) {
  EdgeSlot& e = merge.edges[from][word];
  uint32_t votes[2] = {e.votes[0].load(std::memory_order_relaxed), e.votes[1].load(std::memory_order_relaxed)};
  int hit = -1;
  for (int k = 0; k < 2; ++k) {
    uint32_t t = e.to[k].load(std::memory_order_relaxed);
    if (t != 0 && votes[k] != 0 && root_of(t) == to) hit = k;
  }
  if (hit < 0) {
    int weaker = votes[0] <= votes[1] ? 0 : 1;
    if (votes[weaker] > 0) {
      e.votes[weaker].store(static_cast<uint8_t>(votes[weaker] - 1), std::memory_order_relaxed);
      return;
    }
    hit = weaker;
    e.to[hit].store(static_cast<uint8_t>(to), std::memory_order_relaxed);
  }
  votes[hit] = votes[hit] < 255 ? votes[hit] + 1 : votes[hit];
  e.votes[hit].store(static_cast<uint8_t>(votes[hit]), std::memory_order_relaxed);
  if (votes[hit] < kEdgeHits) return;
  // Type I: objects of one size pointing to each other's groups.
  if (to != from && granules_of(to) == granules_of(from)) return try_merge(from, to, MergeType::kOne);
  // Type II: one field leading, steadily, to two groups of one size.
  uint32_t other = e.to[1 - hit].load(std::memory_order_relaxed);
  if (other == 0 || votes[1 - hit] < kEdgeHits) return;
  other = root_of(other);
  if (other != to && other != from && granules_of(other) == granules_of(to)) try_merge(other, to, MergeType::kTwo);
}

// The block holding q, if it is one of this heap's segregated blocks;
// nullptr otherwise. Its pages stay mapped while this thread owns it.
const heap::BlockDesc* own_block_of(const heap::ThreadHeap& h, uintptr_t q, heap::PointerInfo* at) {
  const void* p = reinterpret_cast<const void*>(q);
  if (!h.region().contains(p)) return nullptr;
  *at = h.locate(p);
  if (at->kind != heap::PageKind::kSegregated) return nullptr;
  const heap::BlockDesc& b = h.region().block(at->block);
  return heap::owner_of(b.owner_word.load(std::memory_order_relaxed)) == h.id() ? &b : nullptr;
}

// The pool of that block (0: none, or not one of ours).
uint32_t own_group_of(const heap::ThreadHeap& h, uintptr_t q) {
  heap::PointerInfo at;
  const heap::BlockDesc* b = own_block_of(h, q, &at);
  return b != nullptr && b->chain_group <= kGroups ? b->chain_group : 0;
}

// A word of an object of ours. Another thread may write the object
// meanwhile (it was handed over, or is being freed): the scan only learns a
// hint from it, so the race is benign, and kept from ThreadSanitizer.
__attribute__((no_sanitize("thread"))) uintptr_t word_of(const void* obj, uint32_t i) {
  return static_cast<const uintptr_t*>(obj)[i];
}

// Scans `obj`, an earlier object of pool `group`, for pointers into this
// heap's pools.
__attribute__((noinline)) void scan(heap::ThreadHeap* h, uint32_t group, void* obj) {
  // Still in a block of ours of that pool (the program may have freed it
  // since, and the block gone back): its pages are mapped. Only the block's
  // own bytes are read, and only while the object is live.
  heap::PointerInfo at;
  const heap::BlockDesc* b = own_block_of(*h, reinterpret_cast<uintptr_t>(obj), &at);
  if (b == nullptr || b->chain_group != group || h->validate(obj) != heap::FreeStatus::kOk) return;
  uint64_t in_block = at.in_block;
  uint64_t block_bytes = uint64_t{b->pages.value} << heap::kPageShift;
  merge.scans.fetch_add(1, std::memory_order_relaxed);
  uint64_t words = std::min<uint64_t>(granules_of(group), (block_bytes - in_block) / 8);
  if (words > kEdgeWords) words = kEdgeWords;
  uint32_t from = root_of(group);
  for (uint32_t i = 0; i < words; ++i) {
    uint32_t to = own_group_of(*h, word_of(obj, i));
    if (to == 0) continue;
    record_edge(from, i, root_of(to));
    from = root_of(group);  // a merge may have made it another
  }
}

}  // namespace

void chain_merge_enable(bool on) {
  // fork: a child must not inherit the merge lock held by a thread it does
  // not have.
  pthread_atfork([] { while (merge.lock.exchange(true, std::memory_order_acquire)) sched_yield(); },
                 [] { merge.lock.store(false, std::memory_order_release); },
                 [] { merge.lock.store(false, std::memory_order_release); });
  for (uint32_t g = 0; g < kGroupSlots; ++g) group_root[g].store(static_cast<uint8_t>(g), std::memory_order_relaxed);
  merge.on.store(on, std::memory_order_release);
}

void chain_merge_group_given(uint32_t group, uint32_t granules) {
  if (group >= 1 && group <= kGroups) merge.granules[group].store(granules, std::memory_order_relaxed);
}

void chain_merge_allocated(heap::ThreadHeap* h, uint32_t group, void* p) {
  if (!merge.on.load(std::memory_order_relaxed) || p == nullptr || group == 0 || group > kGroups) return;
  void* earlier = h->swap_last_grouped(group, p);
  Observed& o = tl_observed;
  if (--o.countdown != 0) return;
  o.countdown = next_countdown(o);
  if (earlier != nullptr) scan(h, group, earlier);
}

uint32_t chain_merge_root(uint32_t group) { return group < kGroupSlots ? root_of(group) : group; }

ChainMergeStats chain_merge_stats() {
  ChainMergeStats s;
  s.type_one = merge.type_one.load(std::memory_order_relaxed);
  s.type_two = merge.type_two.load(std::memory_order_relaxed);
  s.scans = merge.scans.load(std::memory_order_relaxed);
  return s;
}

}  // namespace memd::region
