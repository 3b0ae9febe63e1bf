#include "daemon/systemd.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace memd::daemon {
namespace {

constexpr int kFirstPassedFd = 3;  // SD_LISTEN_FDS_START

int socket_option(int fd, int option) {
  int value = 0;
  socklen_t len = sizeof value;
  return getsockopt(fd, SOL_SOCKET, option, &value, &len) == 0 ? value : -1;
}

}  // namespace

absl::StatusOr<int> take_activated_socket() {
  const char* pid_text = std::getenv("LISTEN_PID");
  const char* fds_text = std::getenv("LISTEN_FDS");
  int64_t pid = 0;
  int64_t fds = 0;
  bool ours = pid_text != nullptr && fds_text != nullptr && absl::SimpleAtoi(pid_text, &pid) &&
              pid == static_cast<int64_t>(getpid());
  bool counted = ours && absl::SimpleAtoi(fds_text, &fds);
  unsetenv("LISTEN_PID");
  unsetenv("LISTEN_FDS");
  unsetenv("LISTEN_FDNAMES");
  // LISTEN_PID of another process: the variables were inherited by
  // mistake, and the descriptors are not ours to touch.
  if (!ours) return -1;
  if (!counted || fds != 1) {
    return absl::InvalidArgumentError(absl::StrCat("systemd passed LISTEN_FDS=", fds_text,
                                                   "; memd takes exactly one socket (one ListenStream= in memd.socket)"));
  }
  int fd = kFirstPassedFd;
  sockaddr_storage address{};
  socklen_t len = sizeof address;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &len) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("the descriptor systemd passed is not a socket: ",
                                                   std::strerror(errno)));
  }
  if (address.ss_family != AF_UNIX || socket_option(fd, SO_TYPE) != SOCK_STREAM ||
      socket_option(fd, SO_ACCEPTCONN) != 1) {
    return absl::InvalidArgumentError(
        "the socket systemd passed is not a listening Unix stream socket (memd.socket needs ListenStream=/path)");
  }
  // Ours from now on: not inherited by anything memd runs, and never
  // blocking the accept loop.
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

std::string bound_path(int fd) {
  sockaddr_un address{};
  socklen_t len = sizeof address;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &len) != 0 || address.sun_family != AF_UNIX) return "";
  size_t n = len > offsetof(sockaddr_un, sun_path) ? len - offsetof(sockaddr_un, sun_path) : 0;
  return std::string(address.sun_path, strnlen(address.sun_path, n));
}

absl::Status notify_service_manager(std::string_view state) {
  const char* where = std::getenv("NOTIFY_SOCKET");
  if (where == nullptr || *where == '\0') return absl::OkStatus();
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  size_t n = std::strlen(where);
  if ((where[0] != '/' && where[0] != '@') || n >= sizeof address.sun_path) {
    return absl::InvalidArgumentError(absl::StrCat("NOTIFY_SOCKET=", where, " is not a socket path"));
  }
  std::memcpy(address.sun_path, where, n);
  if (where[0] == '@') address.sun_path[0] = '\0';  // an abstract address
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + n + (where[0] == '/' ? 1 : 0));
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  ssize_t sent = sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&address), len);
  int error = errno;
  close(fd);
  if (sent != static_cast<ssize_t>(state.size())) {
    return absl::UnavailableError(absl::StrCat("cannot notify ", where, ": ", std::strerror(error)));
  }
  return absl::OkStatus();
}

}  // namespace memd::daemon
