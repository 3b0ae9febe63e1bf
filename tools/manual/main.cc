// memd-manual: writes one of memd's generated documents (to stdout or OUTPUT). The build
// runs it; `cmake --install` puts what it wrote in place.
//
//   memd-manual memd.8|memdctl.1|memdctl.bash [OUTPUT]
#include <cstdio>
#include <string>
#include <string_view>

#include "daemon/version.h"
#include "tools/manual/manual.h"

int main(int argc, char** argv) {
  std::string_view which = argc == 2 || argc == 3 ? argv[1] : "";
  std::string text;
  if (which == "memd.8") {
    text = memd::manual::memd_man_page(memd::daemon::kVersion);
  } else if (which == "memdctl.1") {
    text = memd::manual::memdctl_man_page(memd::daemon::kVersion);
  } else if (which == "memdctl.bash") {
    text = memd::manual::memdctl_bash_completion();
  } else {
    std::fputs("usage: memd-manual memd.8|memdctl.1|memdctl.bash [OUTPUT]\n", stderr);
    return 2;
  }
  FILE* out = argc == 3 ? std::fopen(argv[2], "w") : stdout;
  if (out == nullptr) {
    std::perror(argv[2]);
    return 1;
  }
  bool written = std::fwrite(text.data(), 1, text.size(), out) == text.size();
  return written && std::fclose(out) == 0 ? 0 : 1;
}
