// Allocation sampling, as TCMalloc does it: each thread heap counts down the
// bytes it allocates and, when the count passes zero, the allocation is a
// sample; the next countdown is drawn from an exponential distribution with
// mean `period`, so every byte is equally likely to be sampled and large
// objects are sampled more often than small ones.
//
// A sampled small or medium object is placed in a large block, with a chunk
// header: free finds it on the large path (never on the segregated fast
// path). Every sampled chunk is marked in its header (kChunkSampled, with how
// it was counted), a sampled huge run in its block's flags (kBlockSampled):
// only marked objects reach the `freeing` hook, and the owner's inline free
// of a large chunk pays nothing for sampling. The hooks (process-wide, set
// by the telemetry layer) record each sample with its stack, and each free
// of a marked object. The heap itself stays policy-free.
//
// With sampling off, a heap's countdown is a probe (mean
// kSamplingProbeBytes): when it runs out, the heap looks whether sampling
// was turned on. A heap made before it was (the shim's first thread heap is
// made by libstdc++'s constructor, before the shim's turns sampling on)
// therefore samples from its next probe on, and end_sample_countdown keeps
// that probe's allocation with the probability that makes the heap sample
// as if its countdown had been drawn with the new period at the moment the
// period changed: from its next allocation on, nothing lost (for periods
// of at least kSamplingProbeBytes). The malloc fast path is the same
// subtraction and branch either way.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "heap/layout.h"

namespace memd::heap {

struct SamplingHooks {
  // After a sampled allocation of `requested` bytes at p (a large chunk or a
  // huge run), counted in the heap's counters as `counted_bytes` (its size
  // class's size, or its usable bytes). Runs on the allocating thread,
  // inside malloc: no allocation.
  void (*allocated)(const Region& r, void* p, size_t requested, size_t counted_bytes);
  // Before a marked (sampled) large chunk or huge run at p is freed (the
  // heap counts the free as its mark says). The sample may be another process's (an
  // object of a shared region), or one the hooks did not keep: the hook
  // looks it up and forgets it if it has it. Runs on the freeing thread,
  // inside free: no allocation.
  void (*freeing)(const Region& r, void* p);
};

inline constexpr uint32_t kCountedLarge = 0xfffffffeu;

// Sets the hooks and the period (0: no new samples; the hooks still see the
// frees of earlier ones), for every thread heap. A heap sees a change at the
// end of its running countdown; with sampling off, that is a probe every
// kSamplingProbeBytes on average (see end_sample_countdown).
void set_sampling(const SamplingHooks* hooks, uint64_t period_bytes);

namespace internal {
// Defined in sampling.cc (not inline variables: those can be merged across
// shared libraries, and the shim and its daemon link keep one each).
extern std::atomic<const SamplingHooks*> sampling_hooks;
extern std::atomic<uint64_t> sampling_period;
// -ln(v / 2^53) in Q32 fixed point, for v in [1, 2^53]: the exponential
// draw behind next_sample_countdown.
uint64_t minus_ln_q32(uint64_t v);
// 1 - e^-x for x >= 0 (0 for anything else), without libm.
double one_minus_exp_neg(double x);
}  // namespace internal

inline const SamplingHooks* sampling_hooks() { return internal::sampling_hooks.load(std::memory_order_acquire); }
inline uint64_t sampling_period() { return internal::sampling_period.load(std::memory_order_acquire); }

// The mean of the countdown a heap runs while sampling is off: how often,
// in bytes allocated, it looks whether sampling was turned on. A heap made
// before sampling was turned on samples as one made after, from its next
// allocation, for periods of at least this much (the default, 512 KiB, is
// twice it); with a shorter period, what it allocates until its next look
// (this much on average) goes unsampled. A look costs a draw, about 100
// instructions: with sampling off, objects this large or larger pay it
// nearly every time, smaller ones in proportion to their size
// (bench/README.md, "Sampling off").
inline constexpr uint64_t kSamplingProbeBytes = uint64_t{256} << 10;

// A draw from the exponential distribution with mean `mean` bytes (at
// least 1), from a per-heap random state.
int64_t next_sample_countdown(uint64_t mean, uint64_t* rng);

// What a thread heap keeps to sample its allocations, besides the countdown
// itself (which sits among the heap's fast-path fields).
struct SampleDraws {
  uint64_t rng = 0;   // xorshift64* state
  uint64_t mean = 0;  // the mean the running countdown was drawn with
};

// The first countdown of a heap, with sampling at `period` (0: off).
int64_t start_sample_countdown(uint64_t period, SampleDraws* d);

// A heap's countdown ran out during an allocation of `size` bytes, with
// sampling now at `period` (0: off).
struct CountdownEnd {
  bool sample;   // the allocation is a sample
  int64_t next;  // the next countdown
};
CountdownEnd end_sample_countdown(uint64_t period, uint64_t size, SampleDraws* d);

}  // namespace memd::heap
