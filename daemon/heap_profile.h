// Heap profiles in pprof's profile.proto format, built from the sampled
// allocations clients report. The daemon keeps the samples (telemetry
// store); this turns a selection of them into the bytes `go tool pprof`
// reads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace memd::daemon {

// One frame of a sampled stack: a return address in the client process and
// the function the client named for it (empty if it could not).
struct ProfileFrame {
  uint64_t address = 0;
  std::string function;
  // Frames of different processes with the same address are different
  // locations (address spaces differ): this tells them apart.
  uint64_t address_space = 0;
};

struct ProfileSample {
  std::vector<ProfileFrame> stack;  // innermost first
  uint64_t requested_bytes = 0;
  bool live = true;                 // not freed (yet)
};

struct ProfileInput {
  std::vector<ProfileSample> samples;
  uint64_t sample_period_bytes = 0;  // mean bytes between samples; 0: 1 (every allocation)
  int64_t time_nanos = 0;            // when the profile was taken
  std::string comment;               // e.g. "region orders, 3 clients"
};

// A gzipped perftools.profiles.Profile with sample types alloc_objects/count,
// alloc_space/bytes, inuse_objects/count, inuse_space/bytes (inuse_space the
// default), period_type space/bytes. Each sample is unsampled as pprof does:
// it stands for 1 / (1 - exp(-size / period)) allocations.
absl::StatusOr<std::string> build_heap_profile(const ProfileInput& input);

}  // namespace memd::daemon
