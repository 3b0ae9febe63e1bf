// Who owns a region: flock does not say, /proc/locks does. Each line there
// reads "<n>: FLOCK  ADVISORY  WRITE <pid> <major>:<minor>:<inode> 0 EOF"
// (major and minor in hex); waiters are marked "->" and are skipped.
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cstdio>
#include <cstring>

#include "disciplines/shared_internal.h"

namespace memd::disciplines::internal {

pid_t flock_holder(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return 0;
  FILE* locks = std::fopen("/proc/locks", "re");
  if (locks == nullptr) return 0;
  pid_t holder = 0;
  char line[256];
  while (holder == 0 && std::fgets(line, sizeof line, locks) != nullptr) {
    if (std::strstr(line, "->") != nullptr) continue;
    char type[16];
    int pid = 0;
    unsigned dev_major = 0, dev_minor = 0;
    unsigned long inode = 0;
    if (std::sscanf(line, "%*d: %15s %*s %*s %d %x:%x:%lu", type, &pid, &dev_major, &dev_minor, &inode) != 5) {
      continue;
    }
    if (std::strcmp(type, "FLOCK") == 0 && dev_major == major(st.st_dev) && dev_minor == minor(st.st_dev) &&
        inode == st.st_ino) {
      holder = pid;
    }
  }
  std::fclose(locks);
  return holder;
}

}  // namespace memd::disciplines::internal
