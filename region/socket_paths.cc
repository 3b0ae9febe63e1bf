// The daemon's socket paths (socket_paths.h).
#include "region/socket_paths.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

namespace memd::region {

std::string daemon_socket_path() {
  if (const char* s = std::getenv("MEMD_SOCKET"); s != nullptr && *s != '\0') return s;
  if (const char* r = std::getenv("XDG_RUNTIME_DIR"); r != nullptr && *r == '/') {
    return std::string(r) + "/memd/memd.sock";
  }
  if (geteuid() == 0) return kSystemSocket;
  return "/tmp/memd-" + std::to_string(geteuid()) + "/memd.sock";
}

std::string client_socket_path() {
  std::string own = daemon_socket_path();
  const char* set = std::getenv("MEMD_SOCKET");
  if (set != nullptr && *set != '\0') return own;
  struct stat st {};
  auto is_socket = [&](const std::string& path) { return stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode); };
  if (!is_socket(own) && is_socket(kSystemSocket)) return kSystemSocket;
  return own;
}

}  // namespace memd::region
