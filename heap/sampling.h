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
// frees of earlier ones), for every thread heap;
// heaps pick up a change within kSamplingRecheckBytes of allocation.
void set_sampling(const SamplingHooks* hooks, uint64_t period_bytes);

namespace internal {
// Defined in sampling.cc (not inline variables: those can be merged across
// shared libraries, and the shim and its daemon link keep one each).
extern std::atomic<const SamplingHooks*> sampling_hooks;
extern std::atomic<uint64_t> sampling_period;
// -ln(v / 2^53) in Q32 fixed point, for v in [1, 2^53]: the exponential
// draw behind next_sample_countdown.
uint64_t minus_ln_q32(uint64_t v);
}  // namespace internal

inline const SamplingHooks* sampling_hooks() { return internal::sampling_hooks.load(std::memory_order_acquire); }
inline uint64_t sampling_period() { return internal::sampling_period.load(std::memory_order_acquire); }

// How often a heap with sampling off looks again.
inline constexpr int64_t kSamplingRecheckBytes = int64_t{64} << 20;

// The next countdown: exponential with mean `period`, from a per-heap
// random state; kSamplingRecheckBytes when period is 0.
int64_t next_sample_countdown(uint64_t period, uint64_t* rng);

}  // namespace memd::heap
