// Fuzz target: every gRPC handler of the daemon, called with random
// messages by a client that is not libmemd.
//
// The daemon runs in this process (so the sanitizers and the fuzzer's
// coverage see its handlers) and is called over its real Unix socket. Each
// input is one client's visit: a session is opened and a region "fz" opened
// in it, then each step calls one RPC with the input's bytes parsed as its
// request. Flags of a step put real values into the message (the session,
// the region handle, the caller's pid, pages leased earlier) so that calls
// get past the first checks. After the visit its session ends, and every
// region must check clean: whatever a client asks, the daemon's books stay
// right. A call that gets no answer within 20 s is a hang, and a failure.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "region/lease_service.h"
#include "daemon/config.h"
#include "daemon/daemon.h"
#include "daemon/log.h"
#include "fuzz_input.h"
#include "memd/v1/memd.grpc.pb.h"

namespace {

namespace v1 = memd::v1;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using memd::fuzz::FuzzInput;
using memd::fuzz::fail;

constexpr auto kCallDeadline = std::chrono::seconds(20);
const char* const kRegion = "fz";

struct World {
  std::string dir;
  std::unique_ptr<memd::daemon::Daemon> daemon;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Sessions::Stub> sessions;
  std::unique_ptr<v1::Regions::Stub> regions;
  std::unique_ptr<v1::Leases::Stub> leases;
  std::unique_ptr<v1::Admin::Stub> admin;
};
World* world = nullptr;

// What a visit has learnt so far, to put into the messages it sends.
struct Known {
  uint64_t session = 0;
  uint32_t handle = 0;
  uint32_t stash = 0;
  std::vector<uint32_t> pages;  // leased (blocks and runs)
};

std::unique_ptr<grpc::ClientContext> context() {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + kCallDeadline);
  return c;
}

void expect_answer(const grpc::Status& s, const char* method) {
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    fail(std::string(method) + " got no answer in 20 s: the daemon hangs");
  }
}

uint32_t pick_page(FuzzInput& in, const Known& k) {
  uint16_t b = in.take<uint16_t>();
  if ((b & 0x8000) == 0 && !k.pages.empty()) return k.pages[b % k.pages.size()];
  return b & 0x7fff;
}

// Real values into the fields that name them, where the step's flags say so.
void patch(Message* m, uint8_t flags, FuzzInput& in, const Known& k) {
  const auto* d = m->GetDescriptor();
  const auto* r = m->GetReflection();
  auto field = [&](const char* name, FieldDescriptor::CppType type) -> const FieldDescriptor* {
    const FieldDescriptor* f = d->FindFieldByName(name);
    return f != nullptr && f->cpp_type() == type && !f->is_repeated() ? f : nullptr;
  };
  if (auto* f = field("session", FieldDescriptor::CPPTYPE_UINT64); f && (flags & 1)) r->SetUInt64(m, f, k.session);
  if (auto* f = field("region", FieldDescriptor::CPPTYPE_UINT32); f && (flags & 2)) r->SetUInt32(m, f, k.handle);
  if (auto* f = field("handle", FieldDescriptor::CPPTYPE_UINT32); f && (flags & 2)) r->SetUInt32(m, f, k.handle);
  if (auto* f = field("region", FieldDescriptor::CPPTYPE_STRING); f && (flags & 4)) r->SetString(m, f, kRegion);
  if (auto* f = field("name", FieldDescriptor::CPPTYPE_STRING); f && (flags & 4)) r->SetString(m, f, kRegion);
  if (auto* f = field("pid", FieldDescriptor::CPPTYPE_INT32); f && (flags & 8)) r->SetInt32(m, f, getpid());
  if (auto* f = field("owner", FieldDescriptor::CPPTYPE_UINT32); f && (flags & 16)) r->SetUInt32(m, f, k.stash);
  if (auto* f = field("page", FieldDescriptor::CPPTYPE_UINT32); f && (flags & 32)) r->SetUInt32(m, f, pick_page(in, k));
  if (const FieldDescriptor* f = d->FindFieldByName("pages"); f && f->is_repeated() && (flags & 32)) {
    r->ClearField(m, f);
    for (uint8_t n = in.take<uint8_t>() % 40; n > 0; --n) r->AddUInt32(m, f, pick_page(in, k));
  }
}

// One RPC: its request parsed from `bytes` and patched, then called.
template <class Stub, class Request, class Response>
void call(Stub* stub, grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
          const char* name, const std::string& bytes, uint8_t flags, FuzzInput& in, Known& k) {
  Request req;
  if (!req.ParseFromString(bytes)) return;  // gRPC would refuse it before any handler
  patch(&req, flags, in, k);
  Response resp;
  auto c = context();
  grpc::Status s = (stub->*method)(c.get(), req, &resp);
  expect_answer(s, name);
  if (!s.ok()) return;
  if constexpr (std::is_same_v<Response, v1::LeaseResponse>) {
    for (const auto& b : resp.blocks()) k.pages.push_back(b.page());
  } else if constexpr (std::is_same_v<Response, v1::LeaseRunResponse>) {
    k.pages.push_back(resp.run().page());
  }
}

// A session of this process: its stream and what it was told.
struct Session {
  std::unique_ptr<grpc::ClientContext> context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionEvent>> stream;
  uint64_t id = 0;

  // Hello as given (pid and start time made real if `real`); id 0 if refused.
  void open(v1::Hello hello, bool real) {
    context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::hours(1));
    stream = world->sessions->Open(context.get());
    if (real) {
      hello.set_pid(getpid());
      hello.set_start_time(memd::region::process_start_time(getpid()));
    }
    v1::SessionRequest req;
    *req.mutable_hello() = hello;
    v1::SessionEvent event;
    if (stream->Write(req) && stream->Read(&event) && event.has_welcome()) id = event.welcome().session();
  }
  void send(const v1::SessionRequest& req) {
    if (stream) (void)stream->Write(req);
  }
  void close() {
    if (!stream) return;
    stream->WritesDone();
    v1::SessionEvent event;
    while (stream->Read(&event)) {
    }
    expect_answer(stream->Finish(), "Sessions.Open");
    stream.reset();
    context.reset();
    id = 0;
  }
};

void start_world() {
  world = new World();
  char tmpl[] = "/tmp/memd-fuzz-daemon-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) fail("mkdtemp");
  world->dir = tmpl;
  memd::daemon::DaemonConfig config;
  config.socket_path = world->dir + "/memd.sock";
  config.data_dir = world->dir + "/data";
  config.shm_namespace = "fuzz" + std::to_string(getpid());
  config.metrics_address = "";
  config.region_bytes = 8 << 20;
  config.max_region_bytes = 64 << 20;
  config.max_regions = 8;
  config.drain_timeout_s = 1;
  memd::daemon::set_log_level(memd::daemon::LogLevel::kError);
  auto d = memd::daemon::Daemon::start(config);
  if (!d.ok()) fail("the daemon does not start: " + std::string(d.status().message()));
  world->daemon = std::move(*d);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  world->channel = grpc::CreateCustomChannel("unix:" + config.socket_path, grpc::InsecureChannelCredentials(), args);
  world->sessions = v1::Sessions::NewStub(world->channel);
  world->regions = v1::Regions::NewStub(world->channel);
  world->leases = v1::Leases::NewStub(world->channel);
  world->admin = v1::Admin::NewStub(world->channel);
}

void stop_world() {
  if (world == nullptr) return;
  world->daemon.reset();
  std::error_code ec;
  std::filesystem::remove_all(world->dir, ec);
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    if (e.path().filename().string().rfind("memd.fuzz" + std::to_string(getpid()) + ".", 0) == 0) {
      std::filesystem::remove(e.path(), ec);
    }
  }
}

// Opens the visit's own session and region "fz" (made on the first visit).
Known begin_visit(Session& base) {
  v1::Hello hello;
  hello.set_program("fuzz");
  hello.set_client_version(1);
  base.open(hello, true);
  if (base.id == 0) fail("the daemon refused an honest Hello");
  Known k;
  k.session = base.id;
  v1::OpenRegionRequest req;
  req.set_session(base.id);
  req.set_name(kRegion);
  req.set_discipline(v1::DISCIPLINE_FILE);
  req.set_create(true);
  v1::OpenRegionResponse resp;
  auto c = context();
  grpc::Status s = world->regions->Open(c.get(), req, &resp);
  expect_answer(s, "Regions.Open");
  if (s.ok()) {
    k.handle = resp.handle();
    k.stash = resp.stash_owner();
  }
  return k;
}

void check_every_region() {
  v1::CheckRequest req;
  v1::CheckResponse resp;
  auto c = context();
  grpc::Status s = world->admin->Check(c.get(), req, &resp);
  expect_answer(s, "Admin.Check");
  if (!s.ok()) fail("Admin.Check failed: " + s.error_message());
  for (const auto& r : resp.results()) {
    if (!r.ok()) fail("region " + r.region() + " does not check after a visit: " + r.message());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  start_world();
  std::atexit(stop_world);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  Session base, other;
  Known k = begin_visit(base);
  while (!in.empty()) {
    uint8_t method = in.take<uint8_t>();
    uint8_t flags = in.take<uint8_t>();
    std::string bytes = in.bytes(in.take<uint16_t>() % 4096);
    switch (method % 19) {
      case 0: call(world->regions.get(), &v1::Regions::Stub::Open, "Regions.Open", bytes, flags, in, k); break;
      case 1: call(world->regions.get(), &v1::Regions::Stub::Close, "Regions.Close", bytes, flags, in, k); break;
      case 2: call(world->regions.get(), &v1::Regions::Stub::List, "Regions.List", bytes, flags, in, k); break;
      case 3: call(world->regions.get(), &v1::Regions::Stub::Stat, "Regions.Stat", bytes, flags, in, k); break;
      case 4: call(world->regions.get(), &v1::Regions::Stub::Remove, "Regions.Remove", bytes, flags, in, k); break;
      case 5: call(world->leases.get(), &v1::Leases::Stub::Lease, "Leases.Lease", bytes, flags, in, k); break;
      case 6: call(world->leases.get(), &v1::Leases::Stub::Release, "Leases.Release", bytes, flags, in, k); break;
      case 7: call(world->leases.get(), &v1::Leases::Stub::LeaseRun, "Leases.LeaseRun", bytes, flags, in, k); break;
      case 8: call(world->leases.get(), &v1::Leases::Stub::ReleaseRun, "Leases.ReleaseRun", bytes, flags, in, k); break;
      case 9: call(world->leases.get(), &v1::Leases::Stub::ResizeRun, "Leases.ResizeRun", bytes, flags, in, k); break;
      case 10: call(world->admin.get(), &v1::Admin::Stub::Check, "Admin.Check", bytes, flags, in, k); break;
      case 11: call(world->admin.get(), &v1::Admin::Stub::Compact, "Admin.Compact", bytes, flags, in, k); break;
      case 12: call(world->admin.get(), &v1::Admin::Stub::Drain, "Admin.Drain", bytes, flags, in, k); break;
      case 13: call(world->admin.get(), &v1::Admin::Stub::ListClients, "Admin.ListClients", bytes, flags, in, k); break;
      case 14: call(world->admin.get(), &v1::Admin::Stub::Stats, "Admin.Stats", bytes, flags, in, k); break;
      case 15: call(world->admin.get(), &v1::Admin::Stub::Profile, "Admin.Profile", bytes, flags, in, k); break;
      case 16: {  // a second session of this process, with a Hello of the input's
        v1::Hello hello;
        if (!hello.ParseFromString(bytes)) break;
        other.close();
        other.open(hello, flags & 1);
        break;
      }
      case 17: {  // anything on a session's stream (telemetry, a second Hello)
        v1::SessionRequest req;
        if (!req.ParseFromString(bytes)) break;
        (flags & 1 ? other : base).send(req);
        break;
      }
      case 18:
        other.close();
        break;
    }
  }
  other.close();
  base.close();
  check_every_region();
  return 0;
}
