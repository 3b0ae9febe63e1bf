#include "region/chain_pools.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#include <unwind.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "heap/thread_heap.h"
#include "region/chain_merge.h"
#include "region/report_line.h"
#include "region/site_text.h"

namespace memd::region {
namespace {

constexpr uint32_t kMaxDepth = kMaxChainDepth;
constexpr uint32_t kCallerSlots = 4;
constexpr uint32_t kTableSlots = 2048;  // chains tracked; a power of two

// A chain's state word: what its allocations do.
constexpr uint32_t kCounting = 0;
constexpr uint32_t kMixed = 1;      // decided: no pool, its sizes vary
constexpr uint32_t kLonger = 2;     // a wrapper: look at the chain one caller longer
constexpr uint32_t kPooled = 3;     // | group << 8
constexpr uint32_t kPastPools = 4;  // decided: no pool, none was left

struct ChainEntry {
  std::atomic<uint64_t> key{0};  // the chain's hash, never 0; 0: free slot
  uintptr_t pcs[kMaxDepth] = {};
  uint32_t depth = 0;
  std::atomic<uint32_t> state{kCounting};
  // Allocations of the chain looked up in the table (reported): every one
  // while it counts, after that those the caches did not answer.
  std::atomic<uint64_t> allocs{0};
  // The frame of the last address's function at that address: its CFA less
  // the CFA of the frame it called (0: not known). A lengthened chain finds
  // its next caller from it with two loads instead of an unwind: the caller
  // of pcs[depth - 1] returns to *(cfa - 8), cfa being summed from the
  // entry point's CFA. Learned from the unwinds while the chain counts;
  // `unsteady` once two disagree (a frame that varies, as with alloca), or
  // a periodic check finds the loads wrong: then it always unwinds.
  std::atomic<int64_t> frame_bytes{0};
  std::atomic<bool> unsteady{false};
  // While counting (under the lock): the callers one frame further out.
  uint32_t counted = 0;
  uint32_t sampled = 0;    // counted allocations whose caller was looked for
  uint32_t no_caller = 0;  // of those, unwinds that did not find one
  uint32_t first_granules = 0;  // the first counted size, in 8-byte units
  uint32_t same_size = 0;       // counted allocations of that rounded size
  uintptr_t callers[kCallerSlots] = {};
  uint32_t caller_counts[kCallerSlots] = {};
  uint32_t other_callers = 0;
};

using chain_pools_internal::cache_index;
using chain_pools_internal::kCacheLonger;

// The options, set by chain_pools_enable before pooling starts, read-only
// after. Apart from State, which is all zeros at start, so that its tables
// are in .bss (no file pages, no startup cost) rather than .data.
ChainPoolOptions chain_options;

struct State {
  std::atomic<bool> lock{false};
  uint32_t groups_given = 0;
  ChainEntry table[kTableSlots];
  std::atomic<uint64_t> chains{0}, lengthened{0}, pooled{0}, unpooled{0}, mixed{0}, unwinds{0}, table_full{0};
};
State state;

__thread bool tl_in_chain_pools __attribute__((tls_model("initial-exec")));
__thread uint32_t tl_walks __attribute__((tls_model("initial-exec")));  // two-load walks, for the checks
constexpr uint32_t kCallerSample = 4;
constexpr uint32_t kCheckEvery = 1024;  // two-load walks per unwind that checks them
// Which counting allocations look for their caller: one in kCallerSample,
// drawn at random. Every fourth in turn saw only one caller of a wrapper
// whose callers take turns (a, b, a, b: always a), and took it for a site.
__thread uint64_t tl_sample_draw __attribute__((tls_model("initial-exec")));
bool draw_caller_sample() {
  tl_sample_draw = tl_sample_draw * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<uint32_t>(tl_sample_draw >> 32) % kCallerSample == 0;  // an LCG's high bits
}

// A count only the report reads: a plain load and store, not an atomic
// add, on the lengthened chains' path (a racing thread's add may be lost).
void bump(std::atomic<uint64_t>& n) { n.store(n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }

struct Guard {
  Guard() {
    while (state.lock.exchange(true, std::memory_order_acquire)) sched_yield();
  }
  ~Guard() { state.lock.store(false, std::memory_order_release); }
};

uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

uint64_t chain_hash(const uintptr_t* pcs, uint32_t depth) {
  uint64_t h = depth;
  for (uint32_t i = 0; i < depth; ++i) h = mix(h ^ pcs[i]) + i;
  return h == 0 ? 1 : h;
}

// The slot of the chain, or nullptr; with `insert` (under the lock), claimed
// when absent and the table has room.
ChainEntry* find(const uintptr_t* pcs, uint32_t depth, bool insert) {
  uint64_t key = chain_hash(pcs, depth);
  for (uint32_t probe = 0, i = static_cast<uint32_t>(key) & (kTableSlots - 1); probe < 64;
       ++probe, i = (i + 1) & (kTableSlots - 1)) {
    ChainEntry& e = state.table[i];
    uint64_t k = e.key.load(std::memory_order_acquire);
    if (k == key && e.depth == depth && std::memcmp(e.pcs, pcs, depth * sizeof(uintptr_t)) == 0) return &e;
    if (k != 0) continue;
    if (!insert) return nullptr;
    std::memcpy(e.pcs, pcs, depth * sizeof(uintptr_t));
    e.depth = depth;
    e.key.store(key, std::memory_order_release);  // the chain first: lock-free readers compare it
    state.chains.fetch_add(1, std::memory_order_relaxed);
    return &e;
  }
  if (insert) state.table_full.fetch_add(1, std::memory_order_relaxed);
  return nullptr;
}

// The return addresses of the calling stack from `ra` outwards: pcs[0] =
// ra, then up to kMaxDepth - 1 callers; and the frame sizes there
// (frames[i]: the CFA of the frame executing at pcs[i] less the CFA of the
// frame it called; known for i < got - 1). Returns how many (0: ra not
// found).
struct Unwind {
  uintptr_t ra;
  uintptr_t* out;
  int64_t* frames;
  uint32_t want;
  uint32_t got = 0;
  uint32_t seen = 0;
  uintptr_t last_cfa = 0;
};
_Unwind_Reason_Code unwind_step(struct _Unwind_Context* ctx, void* arg) {
  auto* u = static_cast<Unwind*>(arg);
  uintptr_t ip = _Unwind_GetIP(ctx);
  // The context of a frame whose pc is ip carries the CFA of the frame that
  // frame called (libgcc updates the CFA as it steps out of a frame): so
  // the frame at out[i] is measured at out[i + 1].
  uintptr_t callee_cfa = _Unwind_GetCFA(ctx);
  if ((u->got == 0 && ip == u->ra) || (u->got > 0 && ip != 0)) {
    if (u->got > 0) u->frames[u->got - 1] = static_cast<int64_t>(callee_cfa - u->last_cfa);
    u->out[u->got++] = ip;
    u->last_cfa = callee_cfa;
  } else if (u->got > 0) {
    return _URC_END_OF_STACK;
  }
  if (u->got > u->want || ++u->seen > 16) return _URC_END_OF_STACK;
  return _URC_NO_REASON;
}
uint32_t unwind_from(uintptr_t ra, uintptr_t* out, int64_t* frames, uint32_t want) {
  Unwind u{ra, out, frames, want};
  _Unwind_Backtrace(unwind_step, &u);
  state.unwinds.fetch_add(1, std::memory_order_relaxed);
  return u.got;
}

// The word at `addr`: a return address the two-load walk reads in a
// caller's frame. Not instrumented: a frame size gone wrong (then found
// out by the periodic check) may read another word of the stack, which
// AddressSanitizer would take for an overflow of a local.
__attribute__((noinline, no_sanitize("address", "thread"))) uintptr_t read_return_slot(uintptr_t addr) {
  return *reinterpret_cast<const uintptr_t*>(addr);
}

// A frame size the two-load walk may use: within a page, so the loads stay
// in frames the stack holds (a wrong one reads a word of a caller's frame).
bool usable_frame(int64_t bytes) { return bytes >= 16 && bytes <= 4096 && bytes % 8 == 0; }

void learn_frame(ChainEntry& e, int64_t bytes) {
  if (bytes == 0) return;
  int64_t was = 0;
  if (!e.frame_bytes.compare_exchange_strong(was, bytes, std::memory_order_relaxed) && was != bytes) {
    e.unsteady.store(true, std::memory_order_relaxed);
  }
}

uint32_t group_of(uint32_t s) { return (s & 0xff) == kPooled ? s >> 8 : 0; }

// A decided one-address chain into the site cache (see chain_pools.h).
void cache_site(const ChainEntry& e, uint32_t decided) {
  if (e.depth != 1 || e.pcs[0] >= (uintptr_t{1} << 48)) return;
  uint64_t result = group_of(decided);
  if (decided == kLonger) {
    int64_t bytes = e.frame_bytes.load(std::memory_order_relaxed);
    bool steady = usable_frame(bytes) && !e.unsteady.load(std::memory_order_relaxed);
    result = kCacheLonger | (steady ? static_cast<uint64_t>(bytes) / 8 : 0);
  }
  chain_pools_internal::site_cache[cache_index(e.pcs[0])].store(e.pcs[0] << 16 | result, std::memory_order_release);
}

// The last decided two-address chains this thread met through a wrapper
// (a site whose callers get their own chains), found by the two-load walk:
// a hit skips the table. Per thread, so plain words.
struct PairSlot {
  uintptr_t site = 0, caller = 0;
  uint32_t group = 0;
};
constexpr uint32_t kPairSlots = 16;
__thread PairSlot tl_pairs[kPairSlots] __attribute__((tls_model("initial-exec")));
PairSlot& pair_slot(uintptr_t site, uintptr_t caller) {
  return tl_pairs[static_cast<uint32_t>(mix(site ^ caller * 31)) & (kPairSlots - 1)];
}

// Under the lock: one more allocation of a counting chain; `sampled`: its
// next caller was looked for, and is `caller` (0: not found). Decides the
// chain at min_objects.
void count(ChainEntry& e, bool sampled, uintptr_t caller, size_t size) {
  if (e.state.load(std::memory_order_relaxed) != kCounting) return;
  ++e.counted;
  auto granules = static_cast<uint32_t>((size + 7) / 8);
  if (e.first_granules == 0) e.first_granules = granules;
  e.same_size += granules == e.first_granules;
  if (!sampled) {
  } else if (++e.sampled, caller == 0) {
    ++e.no_caller;
  } else {
    uint32_t i = 0;
    while (i < kCallerSlots && e.callers[i] != 0 && e.callers[i] != caller) ++i;
    if (i == kCallerSlots) {
      ++e.other_callers;
    } else {
      e.callers[i] = caller;
      ++e.caller_counts[i];
    }
  }
  if (e.counted < chain_options.min_objects) return;
  uint32_t with_caller = e.sampled - e.no_caller;
  uint32_t top = 0;
  for (uint32_t c : e.caller_counts) top = c > top ? c : top;
  bool wrapper = e.depth < chain_options.max_depth && with_caller * 2 > e.sampled &&
                 uint64_t{top} * 1000 < uint64_t{chain_options.single_caller_permille} * with_caller;
  // A chain of one node type allocates one size (the paper found 78.6% of
  // its object groups so); one of many sizes (strings, buffers) is no
  // structure's nodes, and a pool per size it uses would hold a block per
  // size for a few objects each.
  bool one_size = uint64_t{e.same_size} * 1000 >= uint64_t{chain_options.single_size_permille} * e.counted;
  uint32_t decided;
  if (wrapper) {
    decided = kLonger;
    state.lengthened.fetch_add(1, std::memory_order_relaxed);
  } else if (!one_size) {
    decided = kMixed;
    state.mixed.fetch_add(1, std::memory_order_relaxed);
  } else if (state.groups_given < heap::ThreadHeap::kMaxChainGroups) {
    decided = kPooled | ++state.groups_given << 8;
    chain_merge_group_given(state.groups_given, e.first_granules);
    state.pooled.fetch_add(1, std::memory_order_relaxed);
  } else {
    decided = kPastPools;
    state.unpooled.fetch_add(1, std::memory_order_relaxed);
  }
  e.state.store(decided, std::memory_order_release);
  if (e.depth == 1 && e.pcs[0] < (uintptr_t{1} << 48)) {
    cache_site(e, decided);
  }
}


}  // namespace

namespace chain_pools_internal {

std::atomic<uint64_t> site_cache[kCacheSlots] = {};
std::atomic<bool> enabled{false};
uint32_t max_size = 0;  // nothing pooled until enabled

uint32_t chain_pool_miss(uintptr_t ra, uintptr_t entry_cfa, size_t size) {
  if (tl_in_chain_pools) return 0;  // the unwinder allocated
  // A wrapper's site with its frame known: its caller in two loads, and the
  // pair's decision from this thread's pair slots.
  uint64_t c = site_cache[cache_index(ra)].load(std::memory_order_acquire);
  if ((c >> 16) == ra && (c & kCacheLonger) && (c & (kCacheLonger - 1)) != 0 && entry_cfa != 0 &&
      (tl_walks + 1) % kCheckEvery != 0) {  // the walk that checks goes the long way
    ++tl_walks;
    uintptr_t caller = read_return_slot(entry_cfa + (c & (kCacheLonger - 1)) * 8 - 8);
    PairSlot& slot = pair_slot(ra, caller);
    if (slot.site == ra && slot.caller == caller) return slot.group;
  }
  tl_in_chain_pools = true;
  uintptr_t pcs[kMaxDepth + 1] = {ra};  // one more than a chain holds: its frame size
  int64_t frames[kMaxDepth + 1] = {};
  uint32_t have = 1;  // return addresses of the stack known so far
  bool unwound = false;
  auto unwind = [&] {
    if (unwound) return;
    have = unwind_from(ra, pcs, frames, chain_options.max_depth);
    if (have > chain_options.max_depth) have = chain_options.max_depth;
    unwound = true;
  };
  uintptr_t cfa = entry_cfa;  // the CFA of the frame pcs[depth - 1] returns into; 0: unknown
  bool by_loads = false;      // pcs[1] came from the two-load walk
  uint32_t depth = 1;
  uint32_t group = 0;
  for (;;) {
    ChainEntry* e = find(pcs, depth, false);
    if (e == nullptr) {
      Guard g;
      e = find(pcs, depth, true);
    }
    if (e == nullptr) break;  // the table is full: plain
    uint32_t s = e->state.load(std::memory_order_acquire);
    if (s == kLonger && depth < kMaxDepth) {
      int64_t bytes = e->frame_bytes.load(std::memory_order_relaxed);
      bool steady = cfa != 0 && usable_frame(bytes) && !e->unsteady.load(std::memory_order_relaxed);
      // One walk in kCheckEvery of a thread unwinds anyway, to check the loads.
      bool check = steady && ++tl_walks % kCheckEvery == 0;
      if (steady && !unwound) {
        cfa += static_cast<uintptr_t>(bytes);
        uintptr_t next = read_return_slot(cfa - 8);
        if (check) {
          unwind();
          if (have <= depth || pcs[depth] != next) {
            e->unsteady.store(true, std::memory_order_relaxed);
            cache_site(*e, kLonger);  // the site cache forgets the frame too
          }
          cfa = 0;  // the unwound addresses serve the rest of this walk
        } else {
          pcs[depth] = next;
          have = depth + 1;
          by_loads = by_loads || depth == 1;
        }
      } else {
        unwind();
        cfa = 0;
      }
      if (have <= depth) break;  // the caller is not found: plain
      ++depth;
      continue;
    }
    if (s != kCounting) {
      group = group_of(s);
      if (group != 0) bump(e->allocs);
      if (depth == 2 && by_loads) pair_slot(pcs[0], pcs[1]) = {pcs[0], pcs[1], group};
      break;
    }
    // Counting: the next caller out, if the chain may still grow, and the
    // frame size the chain's walk will need if it does; for one counted
    // allocation in kCallerSample (an unwind costs some ten thousand
    // instructions).
    uintptr_t caller = 0;
    bool sampled = depth < chain_options.max_depth && (have > depth || draw_caller_sample());
    if (sampled) {
      if (have <= depth) unwind();
      caller = have > depth ? pcs[depth] : 0;
      if (unwound && have > depth) learn_frame(*e, frames[depth - 1]);
    }
    bump(e->allocs);
    Guard g;
    count(*e, sampled, caller, size);
    group = group_of(e->state.load(std::memory_order_relaxed));
    break;
  }
  tl_in_chain_pools = false;
  return group;
}

}  // namespace chain_pools_internal

namespace {

uint32_t env_number(const char* name, uint32_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end;
  unsigned long n = std::strtoul(v, &end, 10);
  return *end == '\0' && n <= UINT32_MAX ? static_cast<uint32_t>(n) : fallback;
}

// fork: a child must not inherit the lock held by a thread it does not have.
void lock_before_fork() {
  while (state.lock.exchange(true, std::memory_order_acquire)) sched_yield();
}
void unlock_after_fork() { state.lock.store(false, std::memory_order_release); }

}  // namespace

void chain_pools_enable(const ChainPoolOptions& options) {
  Guard g;
  if (chain_pools_internal::enabled.load(std::memory_order_relaxed)) return;
  pthread_atfork(lock_before_fork, unlock_after_fork, unlock_after_fork);
  chain_options = options;
  ChainPoolOptions& o = chain_options;
  if (o.min_objects == 0) o.min_objects = 1;
  if (o.max_size > heap::ThreadHeap::kChainGroupMaxSize) o.max_size = heap::ThreadHeap::kChainGroupMaxSize;
  if (o.max_depth < 1) o.max_depth = 1;
  if (o.max_depth > kMaxDepth) o.max_depth = kMaxDepth;
  if (o.single_caller_permille > 1000) o.single_caller_permille = 1000;
  if (o.single_size_permille > 1000) o.single_size_permille = 1000;
  chain_pools_internal::max_size = o.max_size;
  chain_merge_enable(o.merge_groups);
  chain_pools_internal::enabled.store(true, std::memory_order_release);
}

ChainPoolOptions chain_pool_options_from_env() {
  ChainPoolOptions o;
  o.min_objects = env_number("MEMD_CHAIN_POOL_MIN_OBJECTS", o.min_objects);
  o.max_size = env_number("MEMD_CHAIN_POOL_MAX_SIZE", o.max_size);
  o.max_depth = env_number("MEMD_CHAIN_POOL_DEPTH", o.max_depth);
  o.merge_groups = env_number("MEMD_CHAIN_POOL_MERGE", o.merge_groups ? 1 : 0) != 0;
  return o;
}

ChainPoolStats chain_pool_stats() {
  ChainPoolStats s;
  s.chains = state.chains.load(std::memory_order_relaxed);
  s.lengthened = state.lengthened.load(std::memory_order_relaxed);
  s.pooled = state.pooled.load(std::memory_order_relaxed);
  s.unpooled = state.unpooled.load(std::memory_order_relaxed);
  s.mixed = state.mixed.load(std::memory_order_relaxed);
  s.unwinds = state.unwinds.load(std::memory_order_relaxed);
  s.table_full = state.table_full.load(std::memory_order_relaxed);
  ChainMergeStats m = chain_merge_stats();
  s.merged = m.type_one + m.type_two;
  return s;
}

namespace {

ChainOutcome outcome_of(uint32_t s) {
  switch (s & 0xff) {
    case kPooled: return ChainOutcome::kPooled;
    case kLonger: return ChainOutcome::kWrapper;
    case kMixed: return ChainOutcome::kMixedSizes;
    default: return ChainOutcome::kPastPools;
  }
}

// f(record) for each decided chain, in table order.
template <class F>
void for_each_decided(F f) {
  for (const ChainEntry& e : state.table) {
    if (e.key.load(std::memory_order_acquire) == 0) continue;
    uint32_t s = e.state.load(std::memory_order_acquire);
    if (s == kCounting) continue;
    ChainRecord r;
    r.outcome = outcome_of(s);
    r.own_pool = group_of(s);
    r.pool = chain_merge_root(r.own_pool);
    r.depth = e.depth;
    // Written under the lock before the decision was published: stable.
    r.counted = e.counted;
    r.object_bytes = e.first_granules * 8;
    r.lookups = e.allocs.load(std::memory_order_relaxed);
    for (uint32_t i = 0; i < e.depth && i < kMaxDepth; ++i) r.frames[i] = e.pcs[i];
    f(r);
  }
}

}  // namespace

size_t chain_pools_list(ChainRecord* out, size_t max) {
  // Pools first, then wrappers, then the chains left plain: what a reader
  // of a bounded list wants most.
  size_t n = 0;
  for (ChainOutcome want : {ChainOutcome::kPooled, ChainOutcome::kWrapper, ChainOutcome::kMixedSizes,
                            ChainOutcome::kPastPools}) {
    for_each_decided([&](const ChainRecord& r) {
      if (r.outcome == want && n < max) out[n++] = r;
    });
  }
  return n;
}

void chain_pools_report(int fd) {
  auto put = [fd](region::Line& l) {
    l.add("\n");
    l.write_to(fd);
  };
  ChainPoolStats st = chain_pool_stats();
  region::Line head;
  head.add("memd chain pools: ");
  head.add_decimal(st.chains);
  head.add(" chains, ");
  head.add_decimal(st.pooled);
  head.add(" pooled, ");
  head.add_decimal(st.lengthened);
  head.add(" lengthened (wrappers), ");
  head.add_decimal(st.unpooled);
  head.add(" past the pools, ");
  head.add_decimal(st.mixed);
  head.add(" of mixed sizes, ");
  head.add_decimal(st.unwinds);
  head.add(" unwinds, ");
  head.add_decimal(st.merged);
  head.add(" merged");
  put(head);
  for_each_decided([&](const ChainRecord& r) {
    region::Line l;
    l.add(r.outcome == ChainOutcome::kWrapper ? "  wrapper" : r.outcome == ChainOutcome::kPooled ? "  pool " : "  plain  ");
    if (r.outcome == ChainOutcome::kPooled) {
      l.add_decimal(r.pool);
      l.add(r.pool < 10 ? " " : "");
      if (r.own_pool != r.pool) {
        l.add(" (merged from ");
        l.add_decimal(r.own_pool);
        l.add(")");
      }
    }
    l.add(" lookups ");
    l.add_decimal(r.lookups);
    l.add(" chain");
    for (uint32_t i = 0; i < r.depth; ++i) {
      l.add(" ");
      region::add_code_address(l, reinterpret_cast<const void*>(r.frames[i]));
    }
    put(l);
  });
}

}  // namespace memd::region
