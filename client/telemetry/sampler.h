// The process's sampled allocations: the heap's sampling hooks
// (heap/sampling.h) record each sample with its call stack, and each free
// of a sampled (marked) object; events wait in a bounded buffer until the
// telemetry reporter drains them. When the buffer is full, events are
// dropped and counted, never waited for.
//
// Data-plane code (it runs inside malloc): no allocation, no exceptions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "client/telemetry/sampling_default.h"
#include "client/telemetry/telemetry_abi.h"

namespace memd::client::telemetry {

// Turns sampling on for every heap of this copy of the library, one sample
// per `period_bytes` allocated on average; 0 turns it off.
void enable_sampling(uint64_t period_bytes);
uint64_t sampling_period_bytes();

// Moves up to `max` waiting events to `out`; returns how many.
size_t drain_sample_events(memd_sample_event* out, size_t max);

struct SamplerCounts {
  uint64_t taken = 0;    // allocations sampled
  uint64_t dropped = 0;  // events lost to a full buffer
};
SamplerCounts sampler_counts();

inline constexpr size_t kSampleBufferEvents = 4096;

}  // namespace memd::client::telemetry
