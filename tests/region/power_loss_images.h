// Files as a power cut leaves them, for the power-loss tests: reading a
// region file whole, and writing an image of it back.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace memd::testing {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Makes the file at `path` hold `bytes`, rewriting only the pages that
// differ from what it holds (the images of one run differ in few pages, and
// truncating and rewriting the whole file each time costs more than the test).
inline bool write_image(const std::string& path, const std::string& bytes) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = ::ftruncate(fd, static_cast<off_t>(bytes.size())) == 0;
  std::string page(4096, '\0');
  for (size_t at = 0; ok && at < bytes.size(); at += page.size()) {
    size_t n = std::min(page.size(), bytes.size() - at);
    ok = ::pread(fd, page.data(), n, static_cast<off_t>(at)) == static_cast<ssize_t>(n);
    if (ok && std::memcmp(page.data(), bytes.data() + at, n) != 0) {
      ok = ::pwrite(fd, bytes.data() + at, n, static_cast<off_t>(at)) == static_cast<ssize_t>(n);
    }
  }
  ::close(fd);
  return ok;
}

// The seeds a power-loss test runs: 1 to `count`, or FIRST to LAST from
// MEMD_POWER_LOSS_SEEDS=FIRST-LAST (a longer run before a release, or one
// failing seed again).
struct SeedRange {
  uint32_t first = 1, last = 1;
  uint32_t count() const { return last - first + 1; }
};
inline SeedRange power_loss_seeds(uint32_t count) {
  SeedRange r{1, count};
  unsigned first = 0, last = 0;
  if (const char* s = std::getenv("MEMD_POWER_LOSS_SEEDS");
      s != nullptr && std::sscanf(s, "%u-%u", &first, &last) == 2 && first >= 1 && last >= first) {
    r = {first, last};
  }
  return r;
}

// MEMD_KEEP_FAILED_IMAGE=PATH keeps an image that failed its checks there,
// for `memdctl file info|check|repair`.
inline void keep_failed_image(const std::string& image) {
  if (const char* path = std::getenv("MEMD_KEEP_FAILED_IMAGE")) (void)write_image(path, image);
}

}  // namespace memd::testing
