// Fuzz target: a profile method summary (VMPROFILE, vmprofile()), the file
// memdctl pprof converts. Any bytes must give a profile or an error naming
// what is wrong; a profile must parse back, with every sample at one
// location of a known function and 0 <= in use <= allocated.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "pprof/profile.pb.h"
#include "tools/memdctl/profile_summary.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::string> r = memd::memdctl::summary_to_pprof(text);
  if (!r.ok()) {
    if (r.status().message().empty()) std::abort();
    return 0;
  }
  perftools::profiles::Profile p;
  if (!p.ParseFromString(*r)) std::abort();
  for (const auto& s : p.sample()) {
    if (s.location_id_size() != 1 || s.value_size() != 4) std::abort();
    uint64_t loc = s.location_id(0);
    if (loc == 0 || loc > static_cast<uint64_t>(p.location_size())) std::abort();
    uint64_t fn = p.location(static_cast<int>(loc - 1)).line(0).function_id();
    if (fn == 0 || fn > static_cast<uint64_t>(p.function_size())) std::abort();
    for (int i = 0; i < 4; ++i) {
      if (s.value(i) < 0) std::abort();
    }
    if (s.value(2) > s.value(0) || s.value(3) > s.value(1)) std::abort();
  }
  return 0;
}
