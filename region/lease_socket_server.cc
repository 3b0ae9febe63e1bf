// The owner end of the lease socket: one thread, one poll loop, and for
// each connection a small state machine (the bytes of the request so far,
// the bytes of the answer not yet sent), so that no peer can make the loop
// wait for it.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "region/lease_socket.h"
#include "region/lease_wire.h"

namespace memd::region {

using lease_wire::Op;
using lease_wire::Request;
using lease_wire::Response;
using lease_wire::set_status;

namespace {

using Clock = std::chrono::steady_clock;

// What a connection is to its requests: its socket, and the lease slot it
// registered with its hello (UINT32_MAX before).
struct Caller {
  int fd;
  uint32_t* client;
};

// Each operation's handler fills `resp` (its status says how it went) and
// returns false only if the connection must be dropped.
using Handler = bool (*)(LeaseService* service, const Caller& caller, const Request& req, Response* resp);

bool answer_hello(LeaseService* service, const Caller& caller, const Request& req, Response* resp) {
  if (*caller.client != UINT32_MAX) {
    set_status(resp, absl::FailedPreconditionError("this connection is registered already"));
    return true;
  }
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(caller.fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.pid != req.pid) {
    set_status(resp, absl::PermissionDeniedError("the process id given does not match the connection's"));
    return false;
  }
  absl::StatusOr<ClientLease> l = service->register_client(req.pid, req.start_time);
  if (!l.ok()) {
    set_status(resp, l.status());
    return false;
  }
  *caller.client = l->slot;
  resp->a = l->slot;
  resp->b = l->holder;
  resp->c = l->stash;
  return true;
}

bool answer_lease(LeaseService* service, const Caller& caller, const Request& req, Response* resp) {
  heap::AcquiredBlock out[kMaxLeaseBatch];
  absl::StatusOr<uint32_t> n = service->lease(*caller.client, static_cast<heap::PageKind>(req.kind),
                                              static_cast<uint16_t>(req.cls), req.owner, req.count, out);
  if (!n.ok()) {
    set_status(resp, n.status());
    return true;
  }
  resp->count = *n;
  for (uint32_t i = 0; i < *n; ++i) {
    resp->blocks[i] = out[i].first.value;
    resp->zeroed[i] = out[i].zeroed;
    resp->adopted[i] = out[i].adopted;
  }
  return true;
}

bool answer_give_back(LeaseService* service, const Caller& caller, const Request& req, Response* resp) {
  heap::PageIndex blocks[kMaxLeaseBatch];
  uint32_t n = std::min(req.count, kMaxLeaseBatch);
  for (uint32_t i = 0; i < n; ++i) blocks[i] = heap::PageIndex{req.blocks[i]};
  set_status(resp, service->give_back(*caller.client, blocks, n));
  return true;
}

bool answer_acquire_huge(LeaseService* service, const Caller& caller, const Request& req, Response* resp) {
  absl::StatusOr<heap::AcquiredBlock> b =
      service->acquire_huge(*caller.client, heap::PageCount{req.pages}, heap::PageCount{req.align});
  if (!b.ok()) {
    set_status(resp, b.status());
    return true;
  }
  resp->blocks[0] = b->first.value;
  resp->zeroed[0] = b->zeroed;
  return true;
}

bool answer_release_huge(LeaseService* service, const Caller& caller, const Request& req, Response* resp) {
  set_status(resp, service->release_huge(*caller.client, heap::PageIndex{req.blocks[0]}));
  return true;
}

bool answer_resize_huge(LeaseService* service, const Caller& caller, const Request& req, Response* resp) {
  bool zeroed = false;
  absl::StatusOr<bool> ok =
      service->resize_huge(*caller.client, heap::PageIndex{req.blocks[0]}, heap::PageCount{req.pages}, &zeroed);
  if (!ok.ok()) {
    set_status(resp, ok.status());
    return true;
  }
  resp->a = *ok;
  resp->zeroed[0] = zeroed;
  return true;
}

struct Operation {
  Op op;
  Handler handler;
  bool needs_hello;  // only a registered connection may ask
};
constexpr Operation kOperations[] = {
    {Op::kHello, answer_hello, false},
    {Op::kLease, answer_lease, true},
    {Op::kGiveBack, answer_give_back, true},
    {Op::kAcquireHuge, answer_acquire_huge, true},
    {Op::kReleaseHuge, answer_release_huge, true},
    {Op::kResizeHuge, answer_resize_huge, true},
};

// Answers one request of the client in lease slot `*client` (UINT32_MAX
// before its hello). Returns false if the connection must be dropped.
bool answer(LeaseService* service, int fd, const Request& req, uint32_t* client, Response* resp) {
  if (req.magic != lease_wire::kMagic) {
    set_status(resp, absl::InvalidArgumentError("not a memd lease request"));
    return false;
  }
  const Operation* op = nullptr;
  for (const Operation& o : kOperations) {
    if (o.op == req.op) op = &o;
  }
  if (op == nullptr) {
    set_status(resp, absl::InvalidArgumentError(absl::StrCat("unknown lease operation ", static_cast<uint32_t>(req.op))));
    return false;
  }
  if (op->needs_hello && *client == UINT32_MAX) {
    set_status(resp, absl::FailedPreconditionError("say hello first"));
    return false;
  }
  return op->handler(service, Caller{fd, client}, req, resp);
}

// One connection. Between calls it holds nothing; in the middle of one it
// holds part of a request, or an answer the peer has not taken yet (it is
// then not read from: a client waits for each answer before its next
// request, and a peer that does not is held to one answer in memory).
struct Connection {
  uint32_t client = UINT32_MAX;  // its lease slot; UINT32_MAX before its hello
  Request request;
  size_t received = 0;  // bytes of `request` so far
  Response response;
  size_t sent = 0;                // bytes of `response` sent, while answering
  bool answering = false;
  bool close_when_sent = false;  // the request was refused: the connection ends
  Clock::time_point progress;    // when a byte of the current call last moved
  bool mid_call() const { return received > 0 || answering; }
};

}  // namespace

// The thread's state: what it serves, and every connection.
class SocketLeaseServer::Loop {
 public:
  explicit Loop(SocketLeaseServer* server) : s_(server) {}
  // The owner is closing, not the clients: their blocks stay theirs (the
  // next owner to open the region recovers whatever they leave).
  ~Loop() {
    for (auto& [fd, c] : conns_) close(fd);
  }
  void run();

 private:
  // What poll waits for: the first stalled peer's deadline, or accepting
  // again after running out of descriptors; -1 if nothing.
  int timeout_ms(Clock::time_point now) const;
  void accept_new();
  // Moves what the connection is ready for; false if it must be dropped.
  bool serve(int fd, Connection& c);
  bool receive(int fd, Connection& c);
  bool respond(int fd, Connection& c);
  bool flush(int fd, Connection& c);
  void drop(int fd);
  void drop_stalled(Clock::time_point now);

  SocketLeaseServer* s_;
  std::unordered_map<int, Connection> conns_;  // by descriptor
  Clock::time_point accept_resumes_{};
};

absl::StatusOr<std::unique_ptr<SocketLeaseServer>> SocketLeaseServer::start(std::string_view path,
                                                                            LeaseService* service,
                                                                            UsableCheck usable) {
  return start(path, service, std::move(usable), Limits{});
}

absl::StatusOr<std::unique_ptr<SocketLeaseServer>> SocketLeaseServer::start(std::string_view path,
                                                                            LeaseService* service,
                                                                            UsableCheck usable, Limits limits) {
  sockaddr_un addr;
  if (absl::Status s = lease_wire::make_address(path, &addr); !s.ok()) return s;
  std::unique_ptr<SocketLeaseServer> server(new SocketLeaseServer());
  server->service_ = service;
  server->usable_ = std::move(usable);
  server->limits_ = limits;
  server->path_ = std::string(path);
  server->listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  server->wake_fd_ = eventfd(0, EFD_CLOEXEC);
  if (server->listen_fd_ < 0 || server->wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  }
  unlink(server->path_.c_str());  // a stale socket of a dead owner
  if (bind(server->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(server->listen_fd_, 64) != 0) {
    return absl::InternalError(absl::StrCat("cannot listen on ", server->path_, ": ", std::strerror(errno)));
  }
  server->thread_ = std::thread([s = server.get()] { Loop(s).run(); });
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

void SocketLeaseServer::Loop::run() {
  std::vector<pollfd> fds;
  for (;;) {
    Clock::time_point now = Clock::now();
    int listen_fd = now >= accept_resumes_ ? s_->listen_fd_ : -1;  // poll skips -1
    fds.assign({{s_->wake_fd_, POLLIN, 0}, {listen_fd, POLLIN, 0}});
    for (auto& [fd, c] : conns_) fds.push_back({fd, static_cast<short>(c.answering ? POLLOUT : POLLIN), 0});
    if (poll(fds.data(), fds.size(), timeout_ms(now)) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[0].revents) return;
    // Connections before accepting: a descriptor closed here cannot come
    // back as a new connection while `fds` still names the old one.
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      if (!serve(fds[i].fd, conns_.at(fds[i].fd))) drop(fds[i].fd);
    }
    drop_stalled(Clock::now());
    if (fds[1].revents & POLLIN) accept_new();
  }
}

int SocketLeaseServer::Loop::timeout_ms(Clock::time_point now) const {
  Clock::time_point wake = Clock::time_point::max();
  if (now < accept_resumes_) wake = accept_resumes_;
  for (const auto& [fd, c] : conns_) {
    if (c.mid_call()) wake = std::min(wake, c.progress + s_->limits_.stalled_peer);
  }
  if (wake == Clock::time_point::max()) return -1;
  if (wake <= now) return 0;
  // Rounded up, so that the deadline has passed when poll returns.
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake - now).count();
  return static_cast<int>(std::min<decltype(ms)>(ms, INT32_MAX));
}

void SocketLeaseServer::Loop::accept_new() {
  for (int burst = 0; burst < 64; ++burst) {  // the rest next round
    int fd = accept4(s_->listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      conns_[fd] = Connection{};
      continue;
    }
    // Out of descriptors, the pending connection stays and the listening
    // socket stays readable: pause rather than spin.
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      accept_resumes_ = Clock::now() + std::chrono::milliseconds(100);
    }
    return;
  }
}

bool SocketLeaseServer::Loop::serve(int fd, Connection& c) {
  // A hang-up or an error shows up here as a failed send or recv.
  return c.answering ? flush(fd, c) : receive(fd, c);
}

bool SocketLeaseServer::Loop::receive(int fd, Connection& c) {
  // Never more than the rest of this request: what follows stays in the
  // socket until this one is answered.
  char* at = reinterpret_cast<char*>(&c.request) + c.received;
  ssize_t r = recv(fd, at, sizeof c.request - c.received, 0);
  if (r < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  if (r == 0) return false;  // EOF: the process exited or was killed
  c.received += static_cast<size_t>(r);
  c.progress = Clock::now();
  if (c.received < sizeof c.request) return true;
  c.received = 0;
  return respond(fd, c);
}

bool SocketLeaseServer::Loop::respond(int fd, Connection& c) {
  c.response = Response{};
  bool was_new = c.client == UINT32_MAX;
  bool keep = true;
  if (absl::Status usable = s_->usable_ ? s_->usable_() : absl::OkStatus(); !usable.ok()) {
    set_status(&c.response, absl::FailedPreconditionError(usable.message()));
  } else {
    keep = answer(s_->service_, fd, c.request, &c.client, &c.response);
  }
  if (was_new && c.client != UINT32_MAX) s_->clients_.fetch_add(1, std::memory_order_relaxed);
  c.answering = true;
  c.sent = 0;
  c.close_when_sent = !keep;
  return flush(fd, c);
}

bool SocketLeaseServer::Loop::flush(int fd, Connection& c) {
  const char* p = reinterpret_cast<const char*>(&c.response);
  while (c.sent < sizeof c.response) {
    ssize_t w = send(fd, p + c.sent, sizeof c.response - c.sent, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;  // the rest at POLLOUT
    if (w <= 0) return false;
    c.sent += static_cast<size_t>(w);
    c.progress = Clock::now();
  }
  c.answering = false;
  return !c.close_when_sent;
}

void SocketLeaseServer::Loop::drop(int fd) {
  uint32_t client = conns_.at(fd).client;
  conns_.erase(fd);
  close(fd);
  if (client != UINT32_MAX) {
    // A damaged region is not touched again, not even to take back.
    if (!s_->usable_ || s_->usable_().ok()) s_->service_->client_gone(client);
    s_->clients_.fetch_sub(1, std::memory_order_relaxed);
  }
}

void SocketLeaseServer::Loop::drop_stalled(Clock::time_point now) {
  std::vector<int> stalled;
  for (const auto& [fd, c] : conns_) {
    if (c.mid_call() && now - c.progress >= s_->limits_.stalled_peer) stalled.push_back(fd);
  }
  for (int fd : stalled) drop(fd);
}

}  // namespace memd::region
