// The profile method's summary (Vmprofile: VMPROFILE=file under the shim,
// vmprofile() in vmalloc.h; the Vmalloc paper's form) as a pprof profile,
// so that `go tool pprof` ranks the call sites:
//
//   file=t.c:n_alloc=2:n_free=1:s_alloc=9:s_free=5:
//       line=4:region=(process):n_alloc=1:n_free=0:s_alloc=4:s_free=0:
//   file=<>:...
//       pc=/usr/lib/x86_64-linux-gnu/libc.so.6+0x8a1b2:region=(process):n_alloc=1:...
//
// One sample per site line, with the four values of a heap profile:
// alloc_objects (n_alloc), alloc_space (s_alloc), inuse_objects (n_alloc -
// n_free), inuse_space (s_alloc - s_free): exact counts, not samples. A
// site with a file is a function named by the file with the site's line; a
// return address is a function named object+0xoffset. The region is a
// label ("region"). Summaries of several regions may follow each other.
#pragma once

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace memd::memdctl {

// The serialized perftools.profiles.Profile (uncompressed: pprof reads it
// as it reads a gzipped one). InvalidArgument naming the first line that
// is not the summary's.
absl::StatusOr<std::string> summary_to_pprof(absl::string_view summary);

}  // namespace memd::memdctl
