// What every unary handler does around its work: count the call (and keep
// its connection from counting as idle until it returns), find the caller's
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

// `method` is the RPC's name (its handler's __func__), for the metrics.
template <class F>
grpc::Status handle(DaemonState* state, const char* method, grpc::ServerContext* context,
                    std::optional<uint64_t> session, F work) {
  auto started = std::chrono::steady_clock::now();
  ConnectionCall in_progress(state->peers, context->peer());  // the connection is not idle meanwhile
  state->rpcs.fetch_add(1, std::memory_order_relaxed);
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
  if (!result.ok()) state->rpc_errors.fetch_add(1, std::memory_order_relaxed);
  grpc::Status status = to_grpc(result);
  state->rpc_stats.record(method, status.error_code());
  state->rpc_stats.observe_lease(method,
                                 std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  return status;
}

}  // namespace memd::daemon
