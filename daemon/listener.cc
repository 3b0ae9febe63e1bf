#include "daemon/listener.h"

#include <fcntl.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "daemon/log.h"

namespace memd::daemon {
namespace {

absl::Status errno_status(std::string_view what, const std::string& path) {
  int e = errno;
  std::string msg = absl::StrCat(std::string(what), " ", path, ": ", std::strerror(e));
  return e == EACCES || e == EPERM ? absl::PermissionDeniedError(msg) : absl::UnavailableError(msg);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Listener>> Listener::start(const std::string& path, uint32_t mode,
                                                          grpc::Server* server, PeerTable* peers) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    return absl::InvalidArgumentError(absl::StrCat("socket path \"", path, "\" must be 1..",
                                                   sizeof addr.sun_path - 1, " bytes"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  std::error_code ec;
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", parent.string(), ": ", ec.message()));

  std::unique_ptr<Listener> l(new Listener());
  l->path_ = path;
  l->server_ = server;
  l->peers_ = peers;
  std::string lock_path = path + ".lock";
  l->lock_fd_ = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (l->lock_fd_ < 0) return errno_status("cannot open", lock_path);
  if (flock(l->lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("another memd already serves ", path, " (", lock_path,
                                                      " is locked)"));
  }
  unlink(path.c_str());  // a socket left by a daemon that crashed
  l->listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (l->listen_fd_ < 0) return errno_status("socket for", path);
  if (bind(l->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return errno_status("cannot bind", path);
  if (chmod(path.c_str(), mode) != 0) return errno_status("cannot chmod", path);
  if (listen(l->listen_fd_, 512) != 0) return errno_status("cannot listen on", path);
  l->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (l->wake_fd_ < 0) return errno_status("eventfd for", path);
  l->thread_ = std::thread([p = l.get()] { p->run(); });
  return l;
}

void Listener::run() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      log_error("poll on the listening socket: ", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    for (;;) {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
          log_warning("accept: ", std::strerror(errno));
        }
        break;
      }
      ucred cred{};
      socklen_t len = sizeof cred;
      if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        log_warning("SO_PEERCRED: ", std::strerror(errno), "; connection refused");
        close(fd);
        continue;
      }
      peers_->add(fd, Peer{cred.pid, cred.uid, cred.gid});
      log_debug("connection fd:", fd, " from pid ", cred.pid, " uid ", cred.uid);
      grpc::AddInsecureChannelFromFd(server_, fd);  // gRPC owns the fd now
    }
  }
}

void Listener::stop() {
  if (wake_fd_ < 0 || !thread_.joinable()) return;
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
  thread_.join();
}

Listener::~Listener() {
  stop();
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(path_.c_str());
  }
  if (wake_fd_ >= 0) close(wake_fd_);
  if (lock_fd_ >= 0) close(lock_fd_);
}

}  // namespace memd::daemon
