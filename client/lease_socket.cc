#include "client/lease_socket.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/lease_wire.h"

namespace memd::client {

using lease_wire::Op;
using lease_wire::Request;
using lease_wire::Response;

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

absl::Status make_address(std::string_view path, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr->sun_path) {
    return absl::InvalidArgumentError(absl::StrCat("socket path of ", path.size(), " bytes (1..",
                                                   sizeof addr->sun_path - 1, ")"));
  }
  std::memcpy(addr->sun_path, path.data(), path.size());
  return absl::OkStatus();
}

void set_status(Response* r, const absl::Status& s) {
  r->code = static_cast<int32_t>(s.code());
  std::string m(s.message());
  std::strncpy(r->message, m.c_str(), sizeof r->message - 1);
}

absl::Status status_of(const Response& r) {
  if (r.code == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(r.code),
                      std::string(r.message, strnlen(r.message, sizeof r.message)));
}

}  // namespace

// --- client end ---

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

// --- owner end ---

namespace {

// Answers one request of the client in lease slot `client` (UINT32_MAX
// before its hello). Returns false if the connection must be dropped.
bool answer(LeaseService* service, int fd, const Request& req, uint32_t* client, Response* resp) {
  if (req.magic != lease_wire::kMagic) {
    set_status(resp, absl::InvalidArgumentError("not a memd lease request"));
    return false;
  }
  if (req.op == Op::kHello) {
    if (*client != UINT32_MAX) {
      set_status(resp, absl::FailedPreconditionError("this connection is registered already"));
      return true;
    }
    ucred cred{};
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.pid != req.pid) {
      set_status(resp, absl::PermissionDeniedError("the process id given does not match the connection's"));
      return false;
    }
    absl::StatusOr<ClientLease> l = service->register_client(req.pid, req.start_time);
    if (!l.ok()) {
      set_status(resp, l.status());
      return false;
    }
    *client = l->slot;
    resp->a = l->slot;
    resp->b = l->holder;
    resp->c = l->stash;
    return true;
  }
  if (*client == UINT32_MAX) {
    set_status(resp, absl::FailedPreconditionError("say hello first"));
    return false;
  }
  switch (req.op) {
    case Op::kLease: {
      heap::AcquiredBlock out[kMaxLeaseBatch];
      absl::StatusOr<uint32_t> n = service->lease(*client, static_cast<heap::PageKind>(req.kind),
                                                  static_cast<uint16_t>(req.cls), req.owner, req.count, out);
      if (!n.ok()) {
        set_status(resp, n.status());
        break;
      }
      resp->count = *n;
      for (uint32_t i = 0; i < *n; ++i) {
        resp->blocks[i] = out[i].first.value;
        resp->zeroed[i] = out[i].zeroed;
        resp->adopted[i] = out[i].adopted;
      }
      break;
    }
    case Op::kGiveBack: {
      heap::PageIndex blocks[kMaxLeaseBatch];
      uint32_t n = std::min(req.count, kMaxLeaseBatch);
      for (uint32_t i = 0; i < n; ++i) blocks[i] = heap::PageIndex{req.blocks[i]};
      set_status(resp, service->give_back(*client, blocks, n));
      break;
    }
    case Op::kAcquireHuge: {
      absl::StatusOr<heap::AcquiredBlock> b =
          service->acquire_huge(*client, heap::PageCount{req.pages}, heap::PageCount{req.align});
      if (!b.ok()) {
        set_status(resp, b.status());
        break;
      }
      resp->blocks[0] = b->first.value;
      resp->zeroed[0] = b->zeroed;
      break;
    }
    case Op::kReleaseHuge:
      set_status(resp, service->release_huge(*client, heap::PageIndex{req.blocks[0]}));
      break;
    case Op::kResizeHuge: {
      bool zeroed = false;
      absl::StatusOr<bool> ok = service->resize_huge(*client, heap::PageIndex{req.blocks[0]},
                                                     heap::PageCount{req.pages}, &zeroed);
      if (!ok.ok()) {
        set_status(resp, ok.status());
        break;
      }
      resp->a = *ok;
      resp->zeroed[0] = zeroed;
      break;
    }
    default:
      set_status(resp, absl::InvalidArgumentError(absl::StrCat("unknown lease operation ", static_cast<uint32_t>(req.op))));
      return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SocketLeaseServer>> SocketLeaseServer::start(std::string_view path,
                                                                            LeaseService* service,
                                                                            UsableCheck usable) {
  sockaddr_un addr;
  if (absl::Status s = make_address(path, &addr); !s.ok()) return s;
  std::unique_ptr<SocketLeaseServer> server(new SocketLeaseServer());
  server->service_ = service;
  server->usable_ = std::move(usable);
  server->path_ = std::string(path);
  server->listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  server->wake_fd_ = eventfd(0, EFD_CLOEXEC);
  if (server->listen_fd_ < 0 || server->wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  }
  unlink(server->path_.c_str());  // a stale socket of a dead owner
  if (bind(server->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(server->listen_fd_, 64) != 0) {
    return absl::InternalError(absl::StrCat("cannot listen on ", server->path_, ": ", std::strerror(errno)));
  }
  server->thread_ = std::thread([s = server.get()] { s->run(); });
  return server;
}

SocketLeaseServer::~SocketLeaseServer() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof one);
    thread_.join();
  }
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(path_.c_str());
  }
  if (wake_fd_ >= 0) close(wake_fd_);
}

void SocketLeaseServer::run() {
  std::map<int, uint32_t> conns;  // fd -> lease slot (UINT32_MAX before hello)
  auto drop = [&](int fd) {
    uint32_t client = conns[fd];
    conns.erase(fd);
    close(fd);
    if (client != UINT32_MAX) {
      // A damaged region is not touched again, not even to take back.
      if (!usable_ || usable_().ok()) service_->client_gone(client);
      clients_.fetch_sub(1, std::memory_order_relaxed);
    }
  };
  for (;;) {
    std::vector<pollfd> fds{{wake_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (auto& [fd, client] : conns) fds.push_back({fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents) break;
    if (fds[1].revents & POLLIN) {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        // A client that sends half a request must not stall the others.
        timeval tv{1, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        conns[fd] = UINT32_MAX;
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      int fd = fds[i].fd;
      Request req;
      Response resp;
      if (!read_all(fd, &req, sizeof req)) {
        drop(fd);
        continue;
      }
      uint32_t& client = conns[fd];
      bool was_new = client == UINT32_MAX;
      bool keep = true;
      if (absl::Status usable = usable_ ? usable_() : absl::OkStatus(); !usable.ok()) {
        set_status(&resp, absl::FailedPreconditionError(usable.message()));
      } else {
        keep = answer(service_, fd, req, &client, &resp);
      }
      if (was_new && client != UINT32_MAX) clients_.fetch_add(1, std::memory_order_relaxed);
      if (!write_all(fd, &resp, sizeof resp) || !keep) drop(fd);
    }
  }
  // The owner is closing, not the clients: their blocks stay theirs (the
  // next owner to open the region recovers whatever they leave).
  for (auto& [fd, client] : conns) close(fd);
}

}  // namespace memd::client
