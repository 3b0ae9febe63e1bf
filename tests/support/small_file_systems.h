// Tests that fill a file system for real: a mount namespace of the calling
// process's own, with small tmpfs file systems mounted over directories of
// its choice, so that ENOSPC comes from the kernel and nothing outside the
// process sees the mounts.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace memd::testing {

inline bool write_text_file(const char* path, const std::string& text) {
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

// Gives this (single-threaded) process a mount namespace of its own with a
// tmpfs of `size` (as mount(8) says it: "1m") on each of `targets`. A user
// namespace makes that possible without privileges; root may also do
// without one. Returns "" or why it cannot be done here.
inline std::string enter_small_file_systems(const std::vector<std::string>& targets, const char* size) {
  const uid_t uid = geteuid();
  const gid_t gid = getegid();
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0) {
    if (!write_text_file("/proc/self/setgroups", "deny") ||
        !write_text_file("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1\n") ||
        !write_text_file("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1\n")) {
      return std::string("cannot map ids in a new user namespace: ") + std::strerror(errno);
    }
  } else if (unshare(CLONE_NEWNS) != 0) {
    return std::string("unshare(CLONE_NEWUSER|CLONE_NEWNS) and unshare(CLONE_NEWNS) are not permitted: ") +
           std::strerror(errno);
  }
  // Nothing mounted here may show up in the parent's namespace.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return std::string("cannot make mounts private: ") + std::strerror(errno);
  }
  const std::string options = std::string("size=") + size + ",mode=0700";
  for (const std::string& target : targets) {
    if (mount("tmpfs", target.c_str(), "tmpfs", 0, options.c_str()) != 0) {
      return "cannot mount a " + std::string(size) + " tmpfs on " + target + ": " + std::strerror(errno);
    }
  }
  return "";
}

}  // namespace memd::testing
