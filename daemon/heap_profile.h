// Heap profiles in pprof's profile.proto format, built from the sampled
// allocations clients report. The daemon keeps the samples (telemetry
// store); this turns a selection of them into the bytes `go tool pprof`
// reads.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"

namespace memd::daemon {

// One frame of a sampled stack: a return address in the client process and
// the function the client named for it (an index into
// ProfileInput::functions; 0, the empty name, if it could not).
struct ProfileFrame {
  uint64_t address = 0;
  uint32_t function = 0;
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
  // Each function name once: stacks are many and names long.
  std::vector<std::string> functions{std::string()};
  // The index of `name` in `functions`, added if new.
  uint32_t function(const std::string& name) {
    auto [it, inserted] = function_index.try_emplace(name, static_cast<uint32_t>(functions.size()));
    if (inserted) functions.push_back(name);
    return it->second;
  }
  std::unordered_map<std::string, uint32_t> function_index{{std::string(), 0}};
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
