// Allocation sampling, as TCMalloc does it: each thread heap counts down the
// bytes it allocates and, when the count passes zero, the allocation is a
// sample; the next countdown is drawn from an exponential distribution with
// mean `period`, so every byte is equally likely to be sampled and large
// objects are sampled more often than small ones.
//
// A sampled small or medium object is placed in a large block, with a chunk
// header: free finds it on the large path (never on the segregated fast
// path), where it asks the hooks whether the chunk is a sampled one. The
// hooks (process-wide, set by the telemetry layer) record the stack and
// keep the table of live samples. The heap itself stays policy-free.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "heap/layout.h"

namespace memd::heap {

struct SamplingHooks {
  // After a sampled allocation of `requested` bytes at p (a large chunk or a
  // huge run), counted in the heap's counters as class `counted_class`
  // (kCountedLarge/kCountedHuge for big objects) of `counted_bytes`.
  // Runs on the allocating thread, inside malloc: no allocation.
  void (*allocated)(const Region& r, void* p, size_t requested, uint32_t counted_class, size_t counted_bytes);
  // Before a large chunk or huge run at p is freed: true if it is a live
  // sample (forgotten now), with how its allocation was counted.
  bool (*freeing)(const Region& r, void* p, uint32_t* counted_class, size_t* counted_bytes);
  // A counting filter over the addresses of live samples, kSampleFilterSlots
  // entries kept by whoever keeps the samples (incremented before
  // `allocated` returns, decremented when `freeing` forgets one): zero in an
  // address's slot means no live sample there, and its free need not call
  // `freeing`. With a few thousand live samples most frees see a zero: a
  // large free with sampling on costs a hash and a load more than with it off.
  const std::atomic<uint8_t>* live_filter;
};

inline constexpr uint32_t kSampleFilterBits = 15;
inline constexpr size_t kSampleFilterSlots = size_t{1} << kSampleFilterBits;
// A counter that reached this stays: its count is no longer known.
inline constexpr uint8_t kSampleFilterSaturated = 255;

inline size_t sample_filter_slot(const void* p) {
  return static_cast<size_t>(((reinterpret_cast<uintptr_t>(p) >> 4) * 0x9e3779b97f4a7c15ull) >>
                             (64 - kSampleFilterBits));
}
// Whether p may be a live sample of `hooks` (false: it certainly is not).
inline bool may_be_sample(const SamplingHooks& hooks, const void* p) {
  return hooks.live_filter[sample_filter_slot(p)].load(std::memory_order_relaxed) != 0;
}

inline constexpr uint32_t kCountedLarge = 0xfffffffeu;
inline constexpr uint32_t kCountedHuge = 0xffffffffu;

// Sets the hooks and the period (0: no new samples; the hooks still see the
// frees of earlier ones), for every thread heap;
// heaps pick up a change within kSamplingRecheckBytes of allocation.
void set_sampling(const SamplingHooks* hooks, uint64_t period_bytes);

namespace internal {
// Read inline, so that every large free's look at the hooks is one load.
// Defined in sampling.cc (not inline variables: those can be merged across
// shared libraries, and the shim and its daemon link keep one each).
extern std::atomic<const SamplingHooks*> sampling_hooks;
extern std::atomic<uint64_t> sampling_period;
}  // namespace internal

inline const SamplingHooks* sampling_hooks() { return internal::sampling_hooks.load(std::memory_order_acquire); }
inline uint64_t sampling_period() { return internal::sampling_period.load(std::memory_order_acquire); }

// How often a heap with sampling off looks again.
inline constexpr int64_t kSamplingRecheckBytes = int64_t{64} << 20;

// The next countdown: exponential with mean `period`, from a per-heap
// random state; kSamplingRecheckBytes when period is 0.
int64_t next_sample_countdown(uint64_t period, uint64_t* rng);

}  // namespace memd::heap
