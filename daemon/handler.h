// What every unary handler does around its work: count the call, find the
// caller's credentials and (if it names one) its session, and turn the
// absl::Status into a gRPC status, counting errors.
#pragma once

#include <memory>
#include <optional>

#include "daemon/services.h"

namespace memd::daemon {

struct Caller {
  Peer peer;
  std::shared_ptr<Session> session;  // null for calls without a session
};

template <class F>
grpc::Status handle(DaemonState* state, grpc::ServerContext* context, std::optional<uint64_t> session, F work) {
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
  return to_grpc(result);
}

}  // namespace memd::daemon
