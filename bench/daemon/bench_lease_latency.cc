// bench_lease_latency: the round trip of memd's lease RPCs while N client
// processes call at once.
//
//   bench_lease_latency --socket PATH [--clients N] [--seconds S] [--call lease|stats]
//                       [--region NAME] [--size-class C] [--warmup N] [--dump FILE]
//
// The parent never touches gRPC (it is not fork-safe): it forks N clients
// and coordinates them through pipes. Each client connects with its own
// memd::Client (which opens its session stream), then opens the shm region
// NAME (created by whichever client comes first) with a raw Regions.Open on
// that client's channel and session: the daemon gives it a lease slot and
// the owner id of its stash, which a lease must name. It makes --warmup
// calls, says it is ready and waits. The parent releases every client at
// once for one common window of S seconds, in which each client loops
//
//   lease   Leases.Lease(segregated, class C, count 1, owner = its stash),
//           then Leases.Release(that block)       (the raw calls of a lease)
//   stats   Admin.Stats, on a channel of its own to the same socket
//           (a unary call whose handler does next to nothing: the floor)
//
// timing every call on its own (steady_clock around the blocking unary
// call, so the time includes the client's gRPC stack, the Unix socket, the
// daemon's handler and its region lock). Every client runs through the
// whole window.
//
// Output, one line of key=value pairs:
//   calls_per_s        sum over clients of (calls_i / loop time_i): all calls
//                      of all clients per second, Lease and Release each
//                      counting one
//   <kind>_p50_us, _p99_us, _p999_us, _mean_us, _max_us, _samples
//                      percentiles of every call of that kind by every
//                      client in the window; kinds: lease and release, or
//                      stats; `all` pools every call
//   all_over_1ms, all_over_50ms  calls that took longer than 1 ms, 50 ms
//   client_calls_min/max  the least and most calls one client made
//   errors             calls that failed (the run exits 1 if any did)
// --dump FILE writes every sample too, one "kind client nanoseconds" line each,
// in the order each client made its calls.
#include <sys/wait.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cinttypes>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "client/daemon_client.h"
#include "client/daemon_connection.h"
#include "memd/v1/memd.grpc.pb.h"

namespace {

using memd_bench::die;
using memd_bench::now_ns;
using memd_bench::read_all;
using memd_bench::write_all;

constexpr const char* kUsage =
    "usage: bench_lease_latency --socket PATH [--clients N] [--seconds S] [--call lease|stats]\n"
    "                           [--region NAME] [--size-class C] [--warmup N] [--dump FILE]\n";

struct Options {
  std::string socket;
  int clients = 1;
  double seconds = 2;
  std::string call = "lease";
  std::string region = "lease-latency";
  uint32_t size_class = 2;  // 16-byte objects: one-page blocks
  uint32_t warmup = 20;
  std::string dump;  // a file for every sample; empty: none
};

// What a client sends back through its own result pipe, followed by its
// samples (nanoseconds): first `first_count` of the first kind, then
// `second_count` of the second.
struct ClientReport {
  int32_t ok = 0;
  uint32_t first_count = 0;
  uint32_t second_count = 0;
  uint32_t errors = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

std::string grpc_error(const char* what, const grpc::Status& s) {
  return std::string(what) + ": " + std::to_string(static_cast<int>(s.error_code())) + " " + s.error_message();
}

// One client's loop; the samples go into `first` (lease or stats) and
// `second` (release).
class Caller {
 public:
  Caller(const Options& o, memd::Client* client) : o_(o), client_(client) {}

  void open() {
    absl::StatusOr<memd::client::DaemonConnection::Current> cur = client_->connection()->current();
    if (!cur.ok()) die("no session: " + cur.status().ToString());
    cur_ = *cur;
    if (o_.call == "stats") {
      admin_ = memd::v1::Admin::NewStub(grpc::CreateChannel("unix:" + o_.socket, grpc::InsecureChannelCredentials()));
      return;
    }
    memd::v1::OpenRegionRequest req;
    req.set_session(cur_.session);
    req.set_name(o_.region);
    req.set_discipline(memd::v1::DISCIPLINE_SHM);
    req.set_create(true);
    req.set_max_bytes(uint64_t{256} << 20);
    req.set_max_clients(256);  // 64 clients, and slots of a previous run still being reclaimed
    req.set_mode(0600);
    memd::v1::OpenRegionResponse resp;
    grpc::ClientContext ctx;
    client_->connection()->set_deadline(&ctx);
    grpc::Status s = cur_.regions->Open(&ctx, req, &resp);
    if (!s.ok()) die(grpc_error("Regions.Open", s));
    handle_ = resp.handle();
    stash_owner_ = resp.stash_owner();
  }

  void close() {
    if (handle_ == 0) return;
    memd::v1::CloseRegionRequest req;
    req.set_session(cur_.session);
    req.set_handle(handle_);
    memd::v1::CloseRegionResponse resp;
    grpc::ClientContext ctx;
    client_->connection()->set_deadline(&ctx);
    grpc::Status s = cur_.regions->Close(&ctx, req, &resp);
    if (!s.ok()) die(grpc_error("Regions.Close", s));
  }

  // One round: a lease and its release, or one stats call.
  void step(std::vector<uint32_t>* first, std::vector<uint32_t>* second) {
    if (o_.call == "stats") {
      memd::v1::StatsRequest req;
      memd::v1::StatsResponse resp;
      grpc::ClientContext ctx;
      client_->connection()->set_deadline(&ctx);
      int64_t t0 = now_ns();
      grpc::Status s = admin_->Stats(&ctx, req, &resp);
      int64_t t1 = now_ns();
      if (!s.ok()) return failed("Admin.Stats", s);
      if (first) first->push_back(static_cast<uint32_t>(t1 - t0));
      return;
    }
    memd::v1::LeaseRequest lreq;
    lreq.set_session(cur_.session);
    lreq.set_region(handle_);
    lreq.set_kind(memd::v1::BLOCK_SEGREGATED);
    lreq.set_size_class(o_.size_class);
    lreq.set_owner(stash_owner_);
    lreq.set_count(1);
    memd::v1::LeaseResponse lresp;
    grpc::ClientContext lctx;
    client_->connection()->set_deadline(&lctx);
    int64_t t0 = now_ns();
    grpc::Status s = cur_.leases->Lease(&lctx, lreq, &lresp);
    int64_t t1 = now_ns();
    if (!s.ok()) return failed("Leases.Lease", s);
    if (lresp.blocks_size() != 1) return failed("Leases.Lease", grpc::Status(grpc::StatusCode::INTERNAL, "no block"));
    if (first) first->push_back(static_cast<uint32_t>(t1 - t0));

    memd::v1::ReleaseRequest rreq;
    rreq.set_session(cur_.session);
    rreq.set_region(handle_);
    rreq.add_pages(lresp.blocks(0).page());
    memd::v1::ReleaseResponse rresp;
    grpc::ClientContext rctx;
    client_->connection()->set_deadline(&rctx);
    int64_t t2 = now_ns();
    s = cur_.leases->Release(&rctx, rreq, &rresp);
    int64_t t3 = now_ns();
    if (!s.ok()) return failed("Leases.Release", s);
    if (second) second->push_back(static_cast<uint32_t>(t3 - t2));
  }

  uint32_t errors() const { return errors_; }

 private:
  void failed(const char* what, const grpc::Status& s) {
    if (errors_++ == 0) std::fprintf(stderr, "bench_lease_latency[%d]: %s\n", getpid(), grpc_error(what, s).c_str());
  }

  const Options& o_;
  memd::Client* client_;
  memd::client::DaemonConnection::Current cur_;
  std::unique_ptr<memd::v1::Admin::Stub> admin_;
  uint32_t handle_ = 0;
  uint32_t stash_owner_ = 0;
  uint32_t errors_ = 0;
};

// Runs in the forked client; never returns.
[[noreturn]] void client_main(const Options& o, int ready_fd, int go_fd, int result_fd) {
  memd::ClientOptions co;
  co.socket = o.socket;
  co.program = "bench_lease_latency";
  absl::StatusOr<std::unique_ptr<memd::Client>> client = memd::Client::connect(co);
  if (!client.ok()) die("connect: " + client.status().ToString());
  Caller caller(o, client->get());
  caller.open();
  for (uint32_t i = 0; i < o.warmup; ++i) caller.step(nullptr, nullptr);

  std::vector<uint32_t> first, second;
  first.reserve(1 << 20);
  second.reserve(1 << 20);
  char byte = 'r';
  write_all(ready_fd, &byte, 1);
  int64_t deadline = 0;
  if (!read_all(go_fd, &deadline, sizeof deadline)) _exit(1);  // the parent gave up

  ClientReport rep;
  rep.start_ns = now_ns();
  while (now_ns() < deadline) caller.step(&first, &second);
  rep.end_ns = now_ns();
  caller.close();
  rep.ok = 1;
  rep.errors = caller.errors();
  rep.first_count = static_cast<uint32_t>(first.size());
  rep.second_count = static_cast<uint32_t>(second.size());
  write_all(result_fd, &rep, sizeof rep);
  write_all(result_fd, first.data(), first.size() * sizeof(uint32_t));
  write_all(result_fd, second.data(), second.size() * sizeof(uint32_t));
  client->reset();
  _exit(0);
}

void print_kind(const char* kind, std::vector<uint32_t>& samples) {
  std::sort(samples.begin(), samples.end());
  auto us = [](double ns) { return ns / 1000.0; };
  std::printf(" %s_samples=%zu %s_p50_us=%.1f %s_p99_us=%.1f %s_p999_us=%.1f %s_mean_us=%.1f %s_max_us=%.1f", kind,
              samples.size(), kind, us(memd_bench::quantile(samples, 0.50)), kind,
              us(memd_bench::quantile(samples, 0.99)), kind, us(memd_bench::quantile(samples, 0.999)), kind,
              us(memd_bench::mean(samples)), kind, us(samples.empty() ? 0 : samples.back()));
}

int run(const Options& o) {
  int ready[2], go[2];
  if (pipe(ready) != 0 || pipe(go) != 0) die("pipe");
  std::vector<pid_t> pids;
  std::vector<int> results;
  std::fflush(nullptr);
  for (int c = 0; c < o.clients; ++c) {
    int result[2];
    if (pipe(result) != 0) die("pipe");
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
      close(ready[0]);
      close(go[1]);
      close(result[0]);
      for (int fd : results) close(fd);  // the other clients' pipes
      client_main(o, ready[1], go[0], result[1]);
    }
    close(result[1]);
    pids.push_back(pid);
    results.push_back(result[0]);
  }
  close(ready[1]);
  close(go[0]);

  bool all_ready = true;
  for (int c = 0; c < o.clients && all_ready; ++c) {
    char byte;
    all_ready = read_all(ready[0], &byte, 1);
  }
  if (all_ready) {
    int64_t deadline = now_ns() + static_cast<int64_t>(o.seconds * 1e9);
    std::vector<int64_t> msgs(static_cast<size_t>(o.clients), deadline);
    write_all(go[1], msgs.data(), msgs.size() * sizeof(int64_t));
  }
  close(go[1]);  // a client still waiting sees end of file and quits

  std::vector<uint32_t> first, second;
  FILE* dump = o.dump.empty() ? nullptr : std::fopen(o.dump.c_str(), "w");
  if (!o.dump.empty() && dump == nullptr) die("cannot write " + o.dump);
  const char* first_kind = o.call == "stats" ? "stats" : "lease";
  int client_index = 0;
  uint64_t errors = 0, calls_min = UINT64_MAX, calls_max = 0;
  double rate_sum = 0;
  int reported = 0;
  for (int fd : results) {
    ClientReport rep;
    if (read_all(fd, &rep, sizeof rep) && rep.ok) {
      size_t at1 = first.size(), at2 = second.size();
      first.resize(at1 + rep.first_count);
      second.resize(at2 + rep.second_count);
      if (!read_all(fd, first.data() + at1, rep.first_count * sizeof(uint32_t)) ||
          !read_all(fd, second.data() + at2, rep.second_count * sizeof(uint32_t))) {
        die("a client's report was cut short");
      }
      for (size_t i = at1; dump != nullptr && i < first.size(); ++i)
        std::fprintf(dump, "%s %d %u\n", first_kind, client_index, first[i]);
      for (size_t i = at2; dump != nullptr && i < second.size(); ++i)
        std::fprintf(dump, "release %d %u\n", client_index, second[i]);
      uint64_t calls = uint64_t{rep.first_count} + rep.second_count;
      calls_min = std::min(calls_min, calls);
      calls_max = std::max(calls_max, calls);
      rate_sum += static_cast<double>(calls) * 1e9 / static_cast<double>(rep.end_ns - rep.start_ns);
      errors += rep.errors;
      ++reported;
    }
    close(fd);
    ++client_index;
  }
  if (dump != nullptr) std::fclose(dump);
  bool clean = true;
  for (pid_t pid : pids) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    clean = clean && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  if (!all_ready || !clean || reported != o.clients) die("a client failed (see its message above)");

  std::vector<uint32_t> all = first;
  all.insert(all.end(), second.begin(), second.end());
  std::printf("call=%s clients=%d window_s=%g calls=%zu calls_per_s=%.1f client_calls_min=%" PRIu64
              " client_calls_max=%" PRIu64 " errors=%" PRIu64,
              o.call.c_str(), o.clients, o.seconds, all.size(), rate_sum, calls_min, calls_max, errors);
  if (o.call == "stats") {
    print_kind("stats", first);
  } else {
    print_kind("lease", first);
    print_kind("release", second);
  }
  print_kind("all", all);
  auto over = [&](uint32_t ns) { return std::count_if(all.begin(), all.end(), [&](uint32_t x) { return x > ns; }); };
  std::printf(" all_over_1ms=%td all_over_50ms=%td\n", over(1000000), over(50000000));
  return errors == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  memd_bench::Args args(argc, argv, kUsage);
  args.only({"socket", "clients", "seconds", "call", "region", "size-class", "warmup", "dump"});
  Options o;
  o.socket = args.text("socket", "");
  o.clients = static_cast<int>(args.number("clients", 1));
  o.seconds = args.real("seconds", 2);
  o.call = args.text("call", "lease");
  o.region = args.text("region", o.region);
  o.size_class = static_cast<uint32_t>(args.number("size-class", o.size_class));
  o.warmup = static_cast<uint32_t>(args.number("warmup", o.warmup));
  o.dump = args.text("dump", "");
  if (o.socket.empty() || o.clients < 1 || (o.call != "lease" && o.call != "stats")) args.bad();
  return run(o);
}
