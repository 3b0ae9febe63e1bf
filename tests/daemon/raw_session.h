// A session made by hand with the generated stubs, for tests that send what
// memd::Client never would (lies, absurd sizes, foreign sessions).
#pragma once

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "region/lease_service.h"
#include "memd/v1/memd.grpc.pb.h"

namespace memd::testing {

struct RawSession {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Sessions::Stub> sessions;
  std::unique_ptr<v1::Regions::Stub> regions;
  std::unique_ptr<v1::Leases::Stub> leases;
  std::unique_ptr<v1::Admin::Stub> admin;
  std::unique_ptr<grpc::ClientContext> ctx;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionEvent>> stream;
  uint64_t id = 0;
  grpc::Status refused;  // why the hello was refused, if it was

  // Opens a session claiming `pid` (0: this process's own), as `program`.
  // Channels of one process share connections unless `own_connection`.
  explicit RawSession(const std::string& socket, pid_t pid = 0, bool own_connection = false,
                      const std::string& program = "raw session") {
    grpc::ChannelArguments args;
    if (own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channel = grpc::CreateCustomChannel("unix:" + socket, grpc::InsecureChannelCredentials(), args);
    sessions = v1::Sessions::NewStub(channel);
    regions = v1::Regions::NewStub(channel);
    leases = v1::Leases::NewStub(channel);
    admin = v1::Admin::NewStub(channel);
    ctx = std::make_unique<grpc::ClientContext>();
    stream = sessions->Open(ctx.get());
    v1::SessionRequest req;
    req.mutable_hello()->set_pid(pid != 0 ? pid : getpid());
    req.mutable_hello()->set_start_time(region::process_start_time(getpid()));
    req.mutable_hello()->set_client_version(1);
    req.mutable_hello()->set_program(program);
    v1::SessionEvent ev;
    if (stream->Write(req) && stream->Read(&ev) && ev.has_welcome()) {
      id = ev.welcome().session();
    } else {
      refused = stream->Finish();
      stream.reset();
    }
  }
  ~RawSession() {
    if (stream) {
      ctx->TryCancel();
      (void)stream->Finish();
    }
  }
  static void deadline(grpc::ClientContext* c) {
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  }
  grpc::Status open(v1::OpenRegionRequest req, v1::OpenRegionResponse* resp) {
    if (req.session() == 0) req.set_session(id);
    grpc::ClientContext c;
    deadline(&c);
    return regions->Open(&c, req, resp);
  }
  grpc::Status stat(const std::string& name, v1::RegionInfo* info) {
    grpc::ClientContext c;
    deadline(&c);
    v1::StatRegionRequest req;
    req.set_name(name);
    return regions->Stat(&c, req, info);
  }
  grpc::Status remove(const std::string& name) {
    grpc::ClientContext c;
    deadline(&c);
    v1::RemoveRegionRequest req;
    req.set_name(name);
    v1::RemoveRegionResponse resp;
    return regions->Remove(&c, req, &resp);
  }
};

// The daemon's check of every region it serves: true if there is one and
// all pass; otherwise why not in `message`.
inline bool check_all(const std::string& socket, std::string* message) {
  RawSession admin(socket);
  grpc::ClientContext ctx;
  RawSession::deadline(&ctx);
  v1::CheckResponse resp;
  grpc::Status s = admin.admin->Check(&ctx, v1::CheckRequest(), &resp);
  if (!s.ok()) {
    *message = s.error_message();
    return false;
  }
  for (const v1::CheckResult& r : resp.results()) {
    if (!r.ok()) {
      *message = r.region() + ": " + r.message();
      return false;
    }
  }
  return resp.results_size() > 0;
}

}  // namespace memd::testing
