// Sessions.Open: one long-lived stream per client process. The handler's
// thread reads the stream until it ends, for whatever reason (the process
// exited, was killed, closed its channel, or the daemon is stopping); then
// the session ends. Commands for the client (drain) are written from other
// threads, one at a time, while this one reads (gRPC allows one reader and
// one writer at once).
//
// A synchronous handler holds a thread per connected client. The callback
// API would not, but mixed with the synchronous services it makes gRPC 1.51
// poll on threads that sleep 100 ms when idle, stalling unrelated calls.
#include <mutex>
#include <set>
#include <string>

#include "daemon/client_text.h"
#include "daemon/handler.h"
#include "daemon/log.h"
#include "daemon/services.h"

namespace memd::daemon {
namespace {
constexpr size_t kMaxProgramBytes = 200;
}  // namespace

grpc::Status SessionService::Open(grpc::ServerContext* context,
                                  grpc::ServerReaderWriter<v1::SessionEvent, v1::SessionRequest>* stream) {
  // In progress for the session's life: libmemd's connection is never idle.
  // It has not spoken until its hello is read (find() below), so a stream
  // that never says hello is still ended by handshake-timeout.
  CallRecord call(state_, context);
  auto refuse = [&](const grpc::Status& s) { return call.finish("Session", s); };
  v1::SessionRequest request;
  if (!stream->Read(&request)) return refuse(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no hello"));
  if (!request.has_hello()) {
    return refuse(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first message of a session must be a hello"));
  }
  std::string connection = context->peer();
  std::optional<Peer> peer = state_->peers->find(connection);
  if (!peer) {
    return refuse(grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                               "the connection's credentials are unknown (connect through the daemon's Unix socket)"));
  }
  // Writes come from other threads (a drain); the table stops calling this
  // before the session ends, so none outlives the handler.
  std::mutex write_lock;
  auto send = [&](const v1::Command& c) {
    v1::SessionEvent e;
    *e.mutable_command() = c;
    std::lock_guard<std::mutex> g(write_lock);
    stream->Write(e);
  };
  // The program's name goes to logs, labels and replies: made safe once,
  // here (cut on a character, escapes for controls), for all of them.
  v1::Hello hello = request.hello();
  hello.set_program(client_text(hello.program(), kMaxProgramBytes));
  v1::SessionEvent welcome;
  absl::StatusOr<std::shared_ptr<Session>> s =
      state_->sessions->open(*peer, connection, hello, send, welcome.mutable_welcome(),
                             [context] { context->TryCancel(); });
  if (!s.ok()) {
    log_warning("session refused for pid ", peer->pid, ": ", s.status().message());
    return refuse(to_grpc(s.status()));
  }
  welcome.mutable_welcome()->set_server_version(1);
  welcome.mutable_welcome()->set_daemon_id(state_->daemon_id);
  {
    std::lock_guard<std::mutex> g(write_lock);
    stream->Write(welcome);
  }
  // Then telemetry reports, until the stream ends.
  ClientIdentity who{(*s)->id, peer->pid, peer->uid, (*s)->program};
  while (stream->Read(&request)) {
    if (!request.has_telemetry() || state_->telemetry == nullptr) continue;
    // Regions the session has had open and that still exist: a region's
    // last report may come after its Close (another call, on another thread).
    std::set<std::string> reportable;
    for (const std::string& name : state_->sessions->ever_attached(**s)) {
      if (state_->regions->find(name) != nullptr) reportable.insert(name);
    }
    state_->telemetry->report(who, reportable, request.telemetry(), state_->config->telemetry_bytes_per_session,
                              state_->config->telemetry_bytes_per_uid);
  }
  // Telemetry first: once the session leaves the table, /metrics no longer
  // counts it as connected, and by then its stored bytes must be gone too.
  if (state_->telemetry != nullptr) {
    state_->telemetry->end_session((*s)->id, state_->config->telemetry_bytes_per_session);
  }
  state_->sessions->end((*s)->id);
  return call.finish("Session", grpc::Status::OK);
}

}  // namespace memd::daemon
