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

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <vector>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/log.h"
#include "daemon/systemd.h"

namespace memd::daemon {
namespace {

absl::Status errno_status(std::string_view what, const std::string& path) {
  int e = errno;
  std::string msg = absl::StrCat(std::string(what), " ", path, ": ", std::strerror(e));
  return e == EACCES || e == EPERM ? absl::PermissionDeniedError(msg) : absl::UnavailableError(msg);
}

// The socket's directory must be ours (or root's) and closed to others:
// whoever can write there can put a socket of their own in our place (a
// default such as /tmp/memd-<uid> can be made by anyone first).
absl::Status check_directory(const std::string& dir) {
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) return errno_status("cannot stat", dir);
  if (!S_ISDIR(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat(dir, " is not a directory"));
  if (st.st_uid != geteuid() && st.st_uid != 0) {
    return absl::PermissionDeniedError(absl::StrCat("the socket's directory ", dir, " belongs to uid ", st.st_uid,
                                                    ", not to this user or root"));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return absl::PermissionDeniedError(
        absl::StrCat("the socket's directory ", dir, " may be written by other users (mode ", mode, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Listener>> Listener::start(const std::string& path, uint32_t mode, int activated_fd,
                                                          grpc::Server* server, PeerTable* peers) {
  std::unique_ptr<Listener> l(new Listener());
  l->listen_fd_ = activated_fd;  // closed by ~Listener whatever happens next
  if (activated_fd >= 0 && bound_path(activated_fd) != path) {
    return absl::FailedPreconditionError(absl::StrCat(
        "systemd passed a socket bound to \"", bound_path(activated_fd), "\" but memd's socket setting is \"", path,
        "\": make ListenStream= in memd.socket and `socket` in memd.conf the same path (clients find memd by it)"));
  }
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
  if (absl::Status s = check_directory(parent.empty() ? "." : parent.string()); !s.ok()) return s;

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
  if (activated_fd < 0) {
    unlink(path.c_str());  // a socket left by a daemon that crashed
    l->listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (l->listen_fd_ < 0) return errno_status("socket for", path);
    l->bound_here_ = true;
    if (bind(l->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      return errno_status("cannot bind", path);
    }
    if (chmod(path.c_str(), mode) != 0) return errno_status("cannot chmod", path);
    if (listen(l->listen_fd_, 512) != 0) return errno_status("cannot listen on", path);
  }
  l->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (l->wake_fd_ < 0) return errno_status("eventfd for", path);
  l->thread_ = std::thread([p = l.get()] { p->run(); });
  return l;
}

namespace {

// Errors of accept() that say the process (or the system) has no descriptor
// or memory for one more socket: the pending connection stays pending, and
// the listening socket stays readable.
bool out_of_descriptors(int error) {
  return error == EMFILE || error == ENFILE || error == ENOBUFS || error == ENOMEM;
}

constexpr std::chrono::milliseconds kFirstPause{10};
constexpr std::chrono::milliseconds kLongestPause{1000};

}  // namespace

void Listener::run() {
  std::vector<pollfd> fds;
  for (;;) {
    Clock::time_point now = Clock::now();
    Swept swept = peers_->sweep(now);
    if (swept.silent != 0) {
      silent_.warn("closed ", swept.silent, " connection(s) that made no call within handshake-timeout");
    }
    if (swept.idle != 0) {
      idle_.warn("closed ", swept.idle, " idle connection(s): no call in progress and none for idle-timeout");
    }
    Clock::time_point next = swept.next;
    bool accepting = pause_ == Clock::duration::zero() || now >= resume_at_;
    if (accepting && held_fd_ >= 0) {  // a connection waits for room: before any other
      accept_pending();
      continue;
    }
    if (!accepting) next = std::min(next, resume_at_);
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});  // a negative fd is left out
    peers_->append_watches(&fds);
    int timeout = -1;
    if (next != Clock::time_point::max()) {
      auto wait = std::chrono::ceil<std::chrono::milliseconds>(next - now).count();
      timeout = static_cast<int>(std::clamp<int64_t>(wait, 0, 60'000));
    }
    if (poll(fds.data(), fds.size(), timeout) < 0) {
      if (errno == EINTR) continue;
      log_error("poll on the listening socket: ", std::strerror(errno));
      return;
    }
    if (fds[0].revents != 0) return;
    if (fds[1].revents != 0) accept_pending();
  }
}

void Listener::accept_pending() {
  for (;;) {
    int fd = held_fd_ >= 0 ? std::exchange(held_fd_, -1)
                           : accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (out_of_descriptors(errno)) {
        pause_accepting(errno);
      } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
        accept_failed_.warn("accept: ", std::strerror(errno));
      }
      return;
    }
    if (!take(fd)) {
      // No descriptor for its watch: it waits, accepted, for room (as it
      // would have in the backlog), and nothing else is accepted meanwhile.
      held_fd_ = fd;
      pause_accepting(EMFILE);
      return;
    }
    pause_ = Clock::duration::zero();
  }
}

void Listener::pause_accepting(int error) {
  pause_ = pause_ == Clock::duration::zero() ? Clock::duration(kFirstPause)
                                               : std::min<Clock::duration>(2 * pause_, kLongestPause);
  resume_at_ = Clock::now() + pause_;
  accept_failed_.warn("accept: ", std::strerror(error), "; accepting again in ",
                      std::chrono::duration_cast<std::chrono::milliseconds>(pause_).count(),
                      " ms (connections that made no call are closed after handshake-timeout)");
}

bool Listener::take(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    log_warning("SO_PEERCRED: ", std::strerror(errno), "; connection refused");
    close(fd);
    return true;
  }
  int watch = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (watch < 0) {
    if (out_of_descriptors(errno)) return false;
    log_warning("cannot watch a connection: ", std::strerror(errno), "; connection refused");
    close(fd);
    return true;
  }
  if (absl::Status s = peers_->add(fd, watch, Peer{cred.pid, cred.uid, cred.gid}); !s.ok()) {
    refused_.warn("connection from pid ", cred.pid, " refused: ", s.message());
    close(watch);
    close(fd);
    return true;
  }
  log_debug("connection fd:", fd, " from pid ", cred.pid, " uid ", cred.uid);
  grpc::AddInsecureChannelFromFd(server_, fd);  // gRPC owns the fd now
  return true;
}

void Listener::stop() {
  if (wake_fd_ >= 0 && thread_.joinable()) {
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof one);
    thread_.join();
  }
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    listen_fd_ = -1;
    if (bound_here_) unlink(path_.c_str());
  }
}

Listener::~Listener() {
  stop();
  if (held_fd_ >= 0) close(held_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
  if (lock_fd_ >= 0) close(lock_fd_);
}

}  // namespace memd::daemon
