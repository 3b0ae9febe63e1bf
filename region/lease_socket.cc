// The client end of the lease socket: one blocking call at a time.
#include "region/lease_socket.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "region/lease_wire.h"

namespace memd::region {

using lease_wire::make_address;
using lease_wire::Op;
using lease_wire::Request;
using lease_wire::Response;
using lease_wire::status_of;

namespace {

bool write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = recv(fd, c, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SocketLeaseChannel>> SocketLeaseChannel::connect(std::string_view path) {
  sockaddr_un addr;
  if (absl::Status s = make_address(path, &addr); !s.ok()) return s;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int e = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot reach the region owner at ", std::string(path), ": ",
                                               std::strerror(e)));
  }
  return std::unique_ptr<SocketLeaseChannel>(new SocketLeaseChannel(fd));
}

SocketLeaseChannel::~SocketLeaseChannel() { close(fd_); }

absl::Status SocketLeaseChannel::call(const Request& req, Response* resp) {
  pthread_mutex_lock(&lock_);
  bool ok = write_all(fd_, &req, sizeof req) && read_all(fd_, resp, sizeof *resp);
  pthread_mutex_unlock(&lock_);
  if (!ok) return absl::UnavailableError("the region owner closed the lease connection");
  return status_of(*resp);
}

absl::StatusOr<ClientLease> SocketLeaseChannel::hello(pid_t pid, uint64_t start_time) {
  Request req;
  req.op = Op::kHello;
  req.pid = pid;
  req.start_time = start_time;
  Response resp;
  if (absl::Status s = call(req, &resp); !s.ok()) return s;
  return ClientLease{resp.a, resp.b, resp.c};
}

absl::StatusOr<uint32_t> SocketLeaseChannel::lease(heap::PageKind kind, uint16_t cls, heap::OwnerId owner,
                                                   uint32_t count, heap::AcquiredBlock* out) {
  Request req;
  req.op = Op::kLease;
  req.kind = static_cast<uint32_t>(kind);
  req.cls = cls;
  req.owner = owner;
  req.count = count;
  Response resp;
  if (absl::Status s = call(req, &resp); !s.ok()) return s;
  uint32_t n = std::min(resp.count, count);
  for (uint32_t i = 0; i < n; ++i) out[i] = {heap::PageIndex{resp.blocks[i]}, resp.zeroed[i] != 0, resp.adopted[i] != 0};
  return n;
}

absl::Status SocketLeaseChannel::give_back(const heap::PageIndex* blocks, uint32_t n) {
  for (uint32_t done = 0; done < n;) {
    Request req;
    req.op = Op::kGiveBack;
    req.count = std::min(n - done, kMaxLeaseBatch);
    for (uint32_t i = 0; i < req.count; ++i) req.blocks[i] = blocks[done + i].value;
    Response resp;
    if (absl::Status s = call(req, &resp); !s.ok()) return s;
    done += req.count;
  }
  return absl::OkStatus();
}

absl::StatusOr<heap::AcquiredBlock> SocketLeaseChannel::acquire_huge(heap::PageCount pages,
                                                                     heap::PageCount align) {
  Request req;
  req.op = Op::kAcquireHuge;
  req.pages = pages.value;
  req.align = align.value;
  Response resp;
  if (absl::Status s = call(req, &resp); !s.ok()) return s;
  return heap::AcquiredBlock{heap::PageIndex{resp.blocks[0]}, resp.zeroed[0] != 0, false};
}

absl::Status SocketLeaseChannel::release_huge(heap::PageIndex first) {
  Request req;
  req.op = Op::kReleaseHuge;
  req.blocks[0] = first.value;
  Response resp;
  return call(req, &resp);
}

absl::StatusOr<bool> SocketLeaseChannel::resize_huge(heap::PageIndex first, heap::PageCount want, bool* zeroed) {
  Request req;
  req.op = Op::kResizeHuge;
  req.blocks[0] = first.value;
  req.pages = want.value;
  Response resp;
  if (absl::Status s = call(req, &resp); !s.ok()) return s;
  *zeroed = resp.zeroed[0] != 0;
  return resp.a != 0;
}

}  // namespace memd::region
