// What every handler does around its work: count the call (and keep its
// connection from counting as idle until it returns; CallRecord, which the
// session stream uses too), and for a unary call find the caller's
// credentials and (if it names one) its session, and turn the
// absl::Status into a gRPC status, counting errors.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include "daemon/services.h"

namespace memd::daemon {

struct Caller {
  Peer peer;
  std::shared_ptr<Session> session;  // null for calls without a session
};

// The bookkeeping of one call, unary or the session stream: counted when it
// starts (its connection is not idle until it ends), and at its end its
// status counted by method, and an error in the daemon's error count too.
class CallRecord {
 public:
  CallRecord(DaemonState* state, grpc::ServerContext* context)
      : state_(state), in_progress_(state->peers, context->peer()) {
    state_->rpcs.fetch_add(1, std::memory_order_relaxed);
  }
  CallRecord(const CallRecord&) = delete;
  CallRecord& operator=(const CallRecord&) = delete;
  // `method` is the RPC's name, for the metrics. Returns `status`.
  grpc::Status finish(const char* method, grpc::Status status) {
    if (!status.ok()) state_->rpc_errors.fetch_add(1, std::memory_order_relaxed);
    state_->rpc_stats.record(method, status.error_code());
    return status;
  }

 private:
  DaemonState* state_;
  ConnectionCall in_progress_;
};

// `method` is the RPC's name (its handler's __func__), for the metrics.
template <class F>
grpc::Status handle(DaemonState* state, const char* method, grpc::ServerContext* context,
                    std::optional<uint64_t> session, F work) {
  auto started = std::chrono::steady_clock::now();
  CallRecord call(state, context);
  absl::Status result;
  std::optional<Peer> peer = state->peers->find(context->peer());
  if (!peer) {
    result = absl::PermissionDeniedError("the connection's credentials are unknown (connect through the daemon's socket)");
  } else {
    Caller caller{*peer, nullptr};
    if (session) {
      absl::StatusOr<std::shared_ptr<Session>> s = state->sessions->find(*session, context->peer());
      if (s.ok()) caller.session = *s;
      else result = s.status();
    }
    if (result.ok()) result = work(caller);
  }
  grpc::Status status = call.finish(method, to_grpc(result));
  state->rpc_stats.observe_lease(method,
                                 std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  return status;
}

}  // namespace memd::daemon
