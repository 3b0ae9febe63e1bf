// Call-chain pooling after the DPA paper (../shared/seeds, "dynamic pool
// allocation by adaptive partial call chain"): the small objects of each
// busy allocation chain get blocks of their own (ThreadHeap::alloc_grouped),
// so a list or tree built by one chain is laid out in allocation order,
// apart from what the rest of the program allocates.
//
// A chain is the return addresses of an allocation, from malloc's caller
// outwards: its adaptive partial call chain (APCC). It starts one address
// long (the call site) and is lengthened by one where the site serves
// several callers -- a wrapper such as xmalloc, or a shared helper -- so
// that each caller gets a chain, and pool, of its own; at most max_depth.
// The paper recognizes wrappers by analysing the binary's data flow; here a
// site is a wrapper when, over its first min_objects allocations, no single
// caller accounts for nearly all of them (found by unwinding those
// allocations, and only those). A chain becomes a pool once it has made
// min_objects allocations of at most max_size bytes (the paper's 100 objects
// and 128 bytes); there are ThreadHeap::kMaxChainGroups pools, handed out
// first come, first served; chains past them stay on the plain path.
//
// Cost: an allocation whose site is a decided one-address chain costs a
// lookup in a direct-mapped cache of return addresses (one load and a
// compare). A lengthened chain costs an unwind of its extra frames on every
// allocation: the price of wrappers, which the paper avoids by rewriting
// the binary's call sites. Sites still counting take a lock.
//
// Process-wide, thread-safe, allocation-free (it runs inside malloc).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace memd::region {

struct ChainPoolOptions {
  uint32_t min_objects = 100;  // allocations of a chain before it gets a pool
  uint32_t max_size = 128;     // bytes: bigger objects stay on the plain path
  uint32_t max_depth = 4;      // return addresses in a chain at most
  // A site is a wrapper when its most frequent caller made fewer than this
  // share (per mille) of its counted allocations.
  uint32_t single_caller_permille = 900;
  // A chain gets a pool only if this share (per mille) of its counted
  // allocations are of one size (8-byte granules): a structure's nodes.
  uint32_t single_size_permille = 900;
  // Merge the pools of chains whose objects point to each other, or are
  // pointed to from one field (the paper's object-group merging,
  // chain_merge.h).
  bool merge_groups = true;
};

struct ChainPoolStats {
  uint64_t chains = 0;          // chains seen (sites and lengthened chains)
  uint64_t lengthened = 0;      // chains found to be wrappers and lengthened
  uint64_t pooled = 0;          // chains given a pool
  uint64_t unpooled = 0;        // chains past the pools' number, left plain
  uint64_t mixed = 0;           // chains of many sizes, left plain
  uint64_t unwinds = 0;         // allocations that unwound extra frames
  uint64_t table_full = 0;      // chains not tracked: the table was full
  uint64_t merged = 0;          // pools merged into another (chain_merge.h)
};

// Turns pooling on for the process (the shim: MEMD_CHAIN_POOLS=1).
// `options` is clamped to what the heap supports. Idempotent.
void chain_pools_enable(const ChainPoolOptions& options);
inline bool chain_pools_enabled();
// Options from the environment: MEMD_CHAIN_POOL_MIN_OBJECTS,
// MEMD_CHAIN_POOL_MAX_SIZE, MEMD_CHAIN_POOL_DEPTH, MEMD_CHAIN_POOL_MERGE
// (0 or 1; defaults above).
ChainPoolOptions chain_pool_options_from_env();

// The pool (1..ThreadHeap::kMaxChainGroups) for an allocation of `size`
// bytes whose caller returns to `ra` (malloc's return address), 0 for the
// plain path. `entry_cfa`: the canonical frame address of the entry point
// (malloc's), whose return address is at entry_cfa - 8; nullptr if not
// known (then a lengthened chain always unwinds).
inline uint32_t chain_pool_for(const void* ra, const void* entry_cfa, size_t size);

ChainPoolStats chain_pool_stats();

// What became of a chain once counted.
enum class ChainOutcome : uint8_t {
  kPooled = 1,      // it has a pool
  kWrapper = 2,     // its site serves several callers: each got a longer chain
  kMixedSizes = 3,  // left plain: its objects are of many sizes
  kPastPools = 4,   // left plain: every pool was taken
};
inline constexpr uint32_t kMaxChainDepth = 4;
struct ChainRecord {
  ChainOutcome outcome = ChainOutcome::kPooled;
  uint32_t pool = 0;          // 1..ThreadHeap::kMaxChainGroups if pooled (the one its objects come from), else 0
  uint32_t own_pool = 0;      // the pool it was given, before any merge
  uint32_t depth = 0;         // return addresses in frames
  uint32_t counted = 0;       // allocations counted before the decision
  uint32_t object_bytes = 0;  // the first size counted, rounded up to 8: a pool's objects'
  uint64_t lookups = 0;       // allocations looked up in the table (see chain_pools_report)
  uintptr_t frames[kMaxChainDepth] = {};  // innermost (malloc's caller) first
};
// The decided chains into out[0..max): pools first, then wrappers, then
// the chains left plain. Returns how many. No malloc, no lock.
size_t chain_pools_list(ChainRecord* out, size_t max);

// Every chain with a pool, or a decision, one per line: its pool, its
// allocations counted, its return addresses as object+0xoffset. No malloc.
void chain_pools_report(int fd);

namespace chain_pools_internal {
// The decided one-address chains: ra << 16 | result: a pool, 0 for none,
// or kCacheLonger | k: the chain is longer (ask chain_pool_miss), and its
// site's frame is k * 8 bytes (0: not known). Direct-mapped.
inline constexpr uint32_t kCacheSlots = 4096;
inline constexpr uint64_t kCacheLonger = 0x8000;
extern std::atomic<uint64_t> site_cache[kCacheSlots];
extern uint32_t max_size;  // set before pooling is enabled, then read-only
extern std::atomic<bool> enabled;
inline uint32_t cache_index(uintptr_t ra) {
  uint64_t h = ra ^ ra >> 33;
  h *= 0xff51afd7ed558ccdull;
  return static_cast<uint32_t>(h ^ h >> 33) & (kCacheSlots - 1);
}
uint32_t chain_pool_miss(uintptr_t ra, uintptr_t entry_cfa, size_t size);
// Each pool's surviving pool after merges (itself if none; 0 for 0):
// chain_merge.cc keeps it. ThreadHeap::kMaxChainGroups + 1 entries.
inline constexpr uint32_t kGroupSlots = 33;
extern std::atomic<uint8_t> group_root[kGroupSlots];
}  // namespace chain_pools_internal

inline bool chain_pools_enabled() { return chain_pools_internal::enabled.load(std::memory_order_acquire); }

inline uint32_t chain_pool_for(const void* ra, const void* entry_cfa, size_t size) {
  namespace in = chain_pools_internal;
  if (size - 1 >= in::max_size) return 0;  // 0 and bigger sizes: plain
  auto pc = reinterpret_cast<uintptr_t>(ra);
  uint64_t c = in::site_cache[in::cache_index(pc)].load(std::memory_order_acquire);
  uint32_t group = __builtin_expect((c >> 16) == pc && (c & 0xffff) < in::kCacheLonger, 1)
                       ? static_cast<uint32_t>(c & 0xffff)
                       : in::chain_pool_miss(pc, reinterpret_cast<uintptr_t>(entry_cfa), size);
  return in::group_root[group].load(std::memory_order_relaxed);
}

}  // namespace memd::region
