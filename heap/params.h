// Tunable parameters of a heap. Every boundary the Vam paper calls tunable is a
// field here; the defaults follow the paper. A region records the parameters it
// was created with, so all processes that map it agree.
#pragma once

#include <cstdint>

namespace memd::heap {

enum class DiscardMode : uint32_t {
  kHysteresis = 0,  // keep a bounded cache of empty pages, discard the rest in ranges
  kImmediate = 1,   // the paper's: discard every page as soon as it is empty
  kPressure = 2,    // discard only when the system is short of memory
  kNever = 3,       // keep everything (benchmarks of the policy itself)
};

struct HeapParams {
  // Size boundaries (bytes). Small objects are headerless in 1-page blocks,
  // medium ones in 4-page blocks up to 512 bytes and in blocks of 8 objects
  // or more above (see size_class.h); large ones share multi-page blocks with
  // per-object headers; anything bigger is a run of pages of its own. The
  // paper's medium_max is 496: past it, its large path (best fit, headers)
  // cost 1.5-2.5x a segregated pair, and a workload of sizes spread up to
  // 64 KiB spent its time there. Classes now reach 64 KiB and, by default,
  // no size is large (large_max == medium_max): an object of a class sits
  // where the last one of its class did, so pages a program never writes
  // (the tail of a buffer it fills in part) stay untouched, where best fit
  // and page runs moved objects over them until every page was resident
  // (log-scale sizes of 32-64 KiB, first and last byte written, 3,000 live:
  // 138 MiB resident against 46 MiB with classes, and mimalloc's 42). The large
  // path stays for heaps made with large_max above medium_max (at most
  // kLargeMaxLimit), and holds sampled and page-aligned objects.
  uint32_t small_max = 120;        // largest small object
  uint32_t medium_max = 65536;     // largest medium object (a class size)
  uint32_t large_max = 65536;      // largest large object; medium_max: none
  // Two pages, not one: the descriptors of one-page blocks sit in adjacent
  // cache lines, and threads that take blocks at the same time interleave
  // them, so two threads writing their own blocks' descriptors wrote
  // neighbouring lines, which the CPU fetches in pairs (two threads, 20,000
  // live 64-byte objects each replaced at random: 29 ns a pair with
  // one-page blocks taken together, 15 ns taken one thread after the other,
  // 14 ns with two-page blocks; 11 ns alone). Two pages also halve the slow
  // paths of a class; a process's peak RSS grows by at most a page per small
  // class in use (python3 -S: 8.76 -> 8.83 MB).
  uint32_t small_block_pages = 2;
  uint32_t medium_block_pages = 4;
  uint32_t large_block_pages = 20;

  // Discard policy (see discard_policy.h).
  DiscardMode discard_mode = DiscardMode::kHysteresis;
  // Empty (dirty) pages kept for reuse: max(floor, ratio x pages in use,
  // refaults), where refaults counts discarded pages that had to be handed
  // out again recently (halved every refault_halving_ms), capped at dirty_max_pages
  // or at the most pages in use lately (halved likewise), whichever is larger:
  // a heap that keeps refaulting what it gave back learns to keep more.
  // Refaults are remembered as long as a free page is kept (the decay): a
  // steady program whose free pages churn through D pages refaults about
  // D x ln 2 / refault_halving_ms pages per ms once it has learned, since
  // what it learned halves away meanwhile -- at 250 ms that was a sawtooth
  // of purges and refaults (wl_phases: 1.9x glibc's page faults, 1.3x at
  // 1000 ms). Keeping more dirty pages for longer costs no idle memory: a
  // run older than the decay is discarded whatever the limit.
  uint32_t dirty_floor_pages = 256;     // 1 MiB
  uint32_t dirty_ratio_percent = 6;
  uint32_t dirty_max_pages = 16384;     // 64 MiB
  uint32_t dirty_decay_ms = 1000;       // empty pages older than this are discarded
  uint32_t refault_halving_ms = 1000;   // how fast refaults are forgotten
  uint32_t empty_blocks_per_class = 1;  // empty blocks a thread heap keeps per class
  // Objects per mid-size block (above 512 bytes) where kMaxMidBlockPages
  // allow (size_class.h). 0 in a region made before this field existed (it
  // sits in what was the header's padding, zero there): 4, the rule those
  // regions' blocks were cut by, which recovery must keep.
  uint32_t mid_block_objects = 8;
};

// Whether a heap has large sizes (medium_max < size <= large_max); with
// large_max == medium_max it has none.
inline bool has_large_sizes(const HeapParams& p) { return p.large_max > p.medium_max; }

// The most objects a mid-size block may be asked to hold (mid_block_objects).
inline constexpr uint32_t kMaxMidBlockObjects = 64;

// The longest block (segregated or large) a heap may use: 8 MiB. Bounded by
// the links of a block's remote list (RemoteList in layout.h).
inline constexpr uint32_t kMaxBlockPages = 2048;

// Whether the parameters describe a heap this code can run: boundaries in
// order, classes and objects that fit their blocks, large_max within the
// large-object table, blocks of at most kMaxBlockPages.
bool params_valid(const HeapParams& params);

}  // namespace memd::heap
