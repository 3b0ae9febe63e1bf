#include "tools/memdctl/pprof_command.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "tools/memdctl/commands.h"
#include "tools/memdctl/profile_summary.h"

namespace memd::memdctl {

int run_pprof(const CommandLine& cl) {
  const std::string& in = cl.args[0];
  std::ifstream f(in, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "memdctl: pprof: cannot read %s: %s\n", in.c_str(), std::strerror(errno));
    return 1;
  }
  std::ostringstream text;
  text << f.rdbuf();
  absl::StatusOr<std::string> profile = summary_to_pprof(text.str());
  if (!profile.ok()) {
    std::fprintf(stderr, "memdctl: pprof: %s: %s\n", in.c_str(), std::string(profile.status().message()).c_str());
    return 1;
  }
  std::string out = cl.output.empty() ? in + ".pb" : cl.output;
  FILE* o = out == "-" ? stdout : std::fopen(out.c_str(), "wb");
  bool ok = o != nullptr && std::fwrite(profile->data(), 1, profile->size(), o) == profile->size();
  if (o != nullptr && o != stdout) ok = std::fclose(o) == 0 && ok;
  if (!ok) {
    std::fprintf(stderr, "memdctl: pprof: cannot write %s: %s\n", out.c_str(), std::strerror(errno));
    return kExitWriteFailed;
  }
  if (o != stdout) std::fprintf(stderr, "memdctl: wrote %s (go tool pprof -top %s)\n", out.c_str(), out.c_str());
  return kExitOk;
}

}  // namespace memd::memdctl
