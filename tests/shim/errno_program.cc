// free() leaves errno as it was (POSIX 2024 requires it; programs read errno
// after cleaning up), for objects of every size: small, large, and huge ones
// whose free in daemon mode is a call to memd. Prints one line per size and
// exits 1 if any free changed errno, so the same output with and without the
// shim means it held under the shim too.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

int main() {
  const size_t sizes[] = {24, 3000, 100000, 3u << 20, 9u << 20, 40u << 20};
  int bad = 0;
  for (size_t size : sizes) {
    for (int round = 0; round < 4; ++round) {
      void* p = std::malloc(size);
      if (p == nullptr) return 2;
      std::memset(p, 1, size < 4096 ? size : 4096);
      errno = ENOTDIR;
      std::free(p);
      if (errno != ENOTDIR) {
        std::printf("free of %zu bytes changed errno to %d (%s)\n", size, errno, std::strerror(errno));
        bad = 1;
      }
    }
    std::printf("free of %zu bytes keeps errno\n", size);
  }
  return bad;
}
