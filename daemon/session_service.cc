// Sessions.Open: one long-lived stream per client process (callback API, so
// that a thousand idle clients hold no thread). The first message is the
// Hello; the stream's end, for whatever reason (the process exited, was
// killed, closed its channel), ends the session.
#include <atomic>
#include <deque>
#include <mutex>

#include "daemon/log.h"
#include "daemon/services.h"

namespace memd::daemon {
namespace {

class SessionReactor final : public grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionEvent> {
 public:
  SessionReactor(grpc::CallbackServerContext* context, DaemonState* state) : context_(context), state_(state) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The client half-closed or went away. Before a hello there is no
      // session: finish. After it, the session lives until the call ends.
      if (session_ == 0) finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no hello"));
      return;
    }
    if (session_ == 0 && !failed_) {
      hello();
    }
    if (!failed_) StartRead(&request_);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> g(mu_);
    writing_ = false;
    if (!ok) return;
    if (!queue_.empty()) write_next_locked();
  }

  // The client went away (or the daemon is stopping): the session ends, and
  // the call must still be finished for OnDone to come.
  void OnCancel() override {
    end_session();
    finish(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    end_session();
    delete this;
  }

 private:
  void hello() {
    state_->rpcs.fetch_add(1, std::memory_order_relaxed);
    if (!request_.has_hello()) {
      finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first message of a session must be a hello"));
      return;
    }
    std::string connection = context_->peer();
    std::optional<Peer> peer = state_->peers->find(connection);
    if (!peer) {
      finish(grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          "the connection's credentials are unknown (connect through the daemon's Unix socket)"));
      return;
    }
    v1::SessionEvent welcome;
    auto send = [this](const v1::Command& c) {
      v1::SessionEvent e;
      *e.mutable_command() = c;
      push(std::move(e));
    };
    absl::StatusOr<std::shared_ptr<Session>> s =
        state_->sessions->open(*peer, connection, request_.hello(), send, welcome.mutable_welcome());
    if (!s.ok()) {
      log_warning("session refused for pid ", peer->pid, ": ", s.status().message());
      finish(to_grpc(s.status()));
      return;
    }
    session_ = (*s)->id;
    welcome.mutable_welcome()->set_server_version(1);
    welcome.mutable_welcome()->set_daemon_id(state_->daemon_id);
    push(std::move(welcome));
  }

  void push(v1::SessionEvent e) {
    std::lock_guard<std::mutex> g(mu_);
    if (finished_) return;
    queue_.push_back(std::move(e));
    if (!writing_) write_next_locked();
  }

  void write_next_locked() {
    current_ = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    StartWrite(&current_);
  }

  void finish(const grpc::Status& s) {
    if (!s.ok() && s.error_code() != grpc::StatusCode::CANCELLED) {
      state_->rpc_errors.fetch_add(1, std::memory_order_relaxed);
    }
    std::lock_guard<std::mutex> g(mu_);
    failed_ = true;
    if (finished_) return;
    finished_ = true;
    Finish(s);
  }

  void end_session() {
    uint64_t id = session_.exchange(0);
    if (id != 0) state_->sessions->end(id);
  }

  grpc::CallbackServerContext* context_;
  DaemonState* state_;
  v1::SessionRequest request_;
  std::mutex mu_;
  std::deque<v1::SessionEvent> queue_;
  v1::SessionEvent current_;
  bool writing_ = false;
  bool finished_ = false;
  std::atomic<bool> failed_{false};
  std::atomic<uint64_t> session_{0};
};

}  // namespace

grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionEvent>* SessionService::Open(
    grpc::CallbackServerContext* context) {
  return new SessionReactor(context, state_);
}

grpc::Status to_grpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace memd::daemon
