// How often allocations are sampled unless told otherwise: a public fact
// (memd::ClientOptions' default), apart from the sampler's internals.
#pragma once

#include <cstdint>

namespace memd::client::telemetry {

// The mean bytes between samples unless a client or MEMD_SAMPLE_BYTES says
// otherwise (Go's and jemalloc's choice; TCMalloc takes 2 MiB).
inline constexpr uint64_t kDefaultSampleBytes = uint64_t{512} << 10;

}  // namespace memd::client::telemetry
