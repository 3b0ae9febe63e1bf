// One RPC of memd made raw (generated stubs, not libmemd), as any user,
// for the visibility test: what a caller sees is printed one item a line,
// and its status is the exit code (0 ok, 10 + gRPC code, 2 usage).
//
//   rpc_probe [--uid N] SOCKET hold NAME:MODE...   a session that opens (creates) each
//       region, reports one sampled allocation in each and in its process heap, their
//       function named secret_of_<uid>; prints "ready", then sleeps until killed
//   rpc_probe [--uid N] SOCKET open NAME            Regions.Open in a session of its own
//   rpc_probe [--uid N] SOCKET claim-pid PID        Sessions.Open claiming another pid
//   rpc_probe [--uid N] SOCKET close SESSION HANDLE Regions.Close naming a session
//   rpc_probe [--uid N] SOCKET lease SESSION HANDLE Leases.Lease naming a session
//   rpc_probe [--uid N] SOCKET regions | stat NAME | remove NAME
//   rpc_probe [--uid N] SOCKET clients | stats | health
//   rpc_probe [--uid N] SOCKET check NAME | compact NAME | drain PID
//   rpc_probe [--uid N] SOCKET profile REGION PID   prints samples=N and each function name
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "pprof/profile.pb.h"
#include "gunzip.h"
#include "raw_session.h"

namespace {

using memd::testing::gunzip;
using memd::testing::RawSession;
namespace v1 = memd::v1;

int exit_code(const grpc::Status& s) {
  if (!s.ok()) std::printf("status %d %s\n", static_cast<int>(s.error_code()), s.error_message().c_str());
  return s.ok() ? 0 : 10 + static_cast<int>(s.error_code());
}

int hold(RawSession& s, const std::vector<std::string>& specs) {
  std::printf("session %llu\n", static_cast<unsigned long long>(s.id));
  v1::SessionRequest req;
  v1::TelemetryReport* r = req.mutable_telemetry();
  uint64_t pc = 0x5eed0000 + getuid();
  v1::Symbol* sym = r->add_symbols();
  sym->set_address(pc);
  sym->set_name("secret_of_" + std::to_string(getuid()));
  auto sample = [&](const std::string& region) {
    v1::Sample* x = r->add_samples();
    x->set_region(region);
    x->set_address(4096 * static_cast<uint64_t>(r->samples_size()));
    x->set_requested_bytes(64);
    x->add_stack(pc);
  };
  sample("");
  for (const std::string& spec : specs) {
    size_t colon = spec.find(':');
    v1::OpenRegionRequest open;
    open.set_name(spec.substr(0, colon));
    open.set_discipline(v1::DISCIPLINE_SHM);
    open.set_create(true);
    open.set_max_bytes(16 << 20);
    open.set_mode(static_cast<uint32_t>(std::strtoul(spec.c_str() + colon + 1, nullptr, 8)));
    v1::OpenRegionResponse resp;
    if (grpc::Status st = s.open(open, &resp); !st.ok()) return exit_code(st);
    std::printf("handle %s %u\n", open.name().c_str(), resp.handle());
    sample(open.name());
  }
  if (!s.stream->Write(req)) return 3;
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) pause();
}

}  // namespace

int main(int argc, char** argv) {
  int a = 1;
  if (a + 1 < argc && std::strcmp(argv[a], "--uid") == 0) {
    uid_t uid = static_cast<uid_t>(std::atoi(argv[a + 1]));
    if (setgid(uid) != 0 || setuid(uid) != 0) return 2;
    a += 2;
  }
  if (argc - a < 2) return 2;
  std::string socket = argv[a], command = argv[a + 1];
  std::vector<std::string> args(argv + a + 2, argv + argc);
  auto arg_u64 = [&](size_t i) { return i < args.size() ? std::strtoull(args[i].c_str(), nullptr, 10) : 0; };

  if (command == "claim-pid") {
    RawSession s(socket, static_cast<pid_t>(arg_u64(0)));
    return exit_code(s.refused);
  }
  RawSession s(socket);
  if (s.id == 0) return exit_code(s.refused);
  grpc::ClientContext c;
  RawSession::deadline(&c);
  if (command == "hold") return hold(s, args);
  if (command == "open" && args.size() == 1) {
    v1::OpenRegionRequest req;
    req.set_name(args[0]);
    v1::OpenRegionResponse resp;
    return exit_code(s.open(req, &resp));
  }
  if (command == "close" && args.size() == 2) {
    v1::CloseRegionRequest req;
    req.set_session(arg_u64(0));
    req.set_handle(static_cast<uint32_t>(arg_u64(1)));
    v1::CloseRegionResponse resp;
    return exit_code(s.regions->Close(&c, req, &resp));
  }
  if (command == "lease" && args.size() == 2) {
    v1::LeaseRequest req;
    req.set_session(arg_u64(0));
    req.set_region(static_cast<uint32_t>(arg_u64(1)));
    req.set_kind(v1::BLOCK_SEGREGATED);
    req.set_size_class(16);
    req.set_count(1);
    v1::LeaseResponse resp;
    return exit_code(s.leases->Lease(&c, req, &resp));
  }
  if (command == "regions") {
    v1::ListRegionsResponse resp;
    grpc::Status st = s.regions->List(&c, v1::ListRegionsRequest(), &resp);
    for (const v1::RegionInfo& r : resp.regions()) std::printf("region %s\n", r.name().c_str());
    return exit_code(st);
  }
  if (command == "stat" && args.size() == 1) {
    v1::RegionInfo info;
    return exit_code(s.stat(args[0], &info));
  }
  if (command == "remove" && args.size() == 1) {
    v1::RemoveRegionRequest req;
    req.set_session(s.id);
    req.set_name(args[0]);
    v1::RemoveRegionResponse resp;
    return exit_code(s.regions->Remove(&c, req, &resp));
  }
  if (command == "clients") {
    v1::ListClientsResponse resp;
    grpc::Status st = s.admin->ListClients(&c, v1::ListClientsRequest(), &resp);
    for (const v1::ClientInfo& ci : resp.clients()) {
      std::printf("client session=%llu pid=%d uid=%u program=%s\n", static_cast<unsigned long long>(ci.session()),
                  ci.pid(), ci.uid(), ci.program().c_str());
      for (const v1::ClientLeaseInfo& l : ci.leases()) std::printf("lease %s\n", l.region().c_str());
    }
    return exit_code(st);
  }
  if (command == "stats") {
    v1::StatsResponse resp;
    grpc::Status st = s.admin->Stats(&c, v1::StatsRequest(), &resp);
    std::printf("regions=%u sessions=%u\n", resp.regions(), resp.sessions());
    return exit_code(st);
  }
  if (command == "health") {
    auto health = grpc::health::v1::Health::NewStub(s.channel);
    grpc::health::v1::HealthCheckResponse resp;
    return exit_code(health->Check(&c, grpc::health::v1::HealthCheckRequest(), &resp));
  }
  if (command == "check" && args.size() == 1) {
    v1::CheckRequest req;
    req.set_region(args[0]);
    v1::CheckResponse resp;
    grpc::Status st = s.admin->Check(&c, req, &resp);
    for (const v1::CheckResult& r : resp.results()) std::printf("checked %s\n", r.region().c_str());
    return exit_code(st);
  }
  if (command == "compact" && args.size() == 1) {
    v1::CompactRequest req;
    req.set_region(args[0]);
    v1::CompactResponse resp;
    return exit_code(s.admin->Compact(&c, req, &resp));
  }
  if (command == "drain" && args.size() == 1) {
    v1::DrainRequest req;
    req.set_pid(static_cast<int32_t>(arg_u64(0)));
    v1::DrainResponse resp;
    return exit_code(s.admin->Drain(&c, req, &resp));
  }
  if (command == "profile" && args.size() == 2) {
    v1::ProfileRequest req;
    req.set_region(args[0]);
    req.set_pid(static_cast<int32_t>(arg_u64(1)));
    v1::ProfileResponse resp;
    grpc::Status st = s.admin->Profile(&c, req, &resp);
    std::printf("samples=%llu\n", static_cast<unsigned long long>(resp.samples()));
    perftools::profiles::Profile p;
    if (st.ok() && p.ParseFromString(gunzip(resp.profile()))) {
      for (const auto& f : p.function()) std::printf("function %s\n", p.string_table(static_cast<int>(f.name())).c_str());
      for (const auto& l : p.location()) std::printf("address 0x%llx\n", static_cast<unsigned long long>(l.address()));
    }
    return exit_code(st);
  }
  return 2;
}
