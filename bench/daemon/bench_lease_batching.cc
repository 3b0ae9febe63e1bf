// bench_lease_batching: how many allocations one lease RPC buys in steady
// state, for a client of memd allocating through memd::Client.
//
//   bench_lease_batching --socket PATH [--region NAME] [--min-size B] [--max-size B]
//                        [--live N] [--pairs N] [--warmup N] [--threads T] [--seed S]
//
// One process connects to memd, creates a shm region of its own (the name
// gets the pid) and runs, in each of T threads: fill a ring of --live
// objects, then --warmup and then --pairs steps of "free a random slot's
// object, allocate a new one of a random size (uniform in [min, max]),
// write a tag at its start and end". Sizes come from a fixed-seed generator.
// memd::Client::lease_calls() (every Lease, Release and run call this
// process made) is read before and after the measured --pairs part, with
// every thread past its warm-up, and so is the daemon's own count of lease
// calls on the region (RegionInfo.lease_rpcs, from Regions.Stat), which
// must agree.
//
// Output, one line of key=value pairs:
//   allocs            allocations in the measured part (all threads)
//   steady_calls      lease calls in the measured part (client's count)
//   daemon_steady_calls  the same, counted by the daemon
//   steady_lease_calls, steady_other_calls  of those, Leases.Lease calls and
//                     the rest (Release, runs), as the daemon counts them
//   blocks_held       blocks the process held at the end of the measured part
//   allocs_per_call   allocs / steady_calls (allocs when there was no call)
//   fill_calls, warmup_calls  lease calls while filling and warming up
//   ns_per_pair       the measured part's wall time / its pairs per thread
#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include <barrier>
#include <cinttypes>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../workloads/common.h"
#include "bench_util.h"
#include "client/daemon_client.h"
#include "client/daemon_connection.h"
#include "memd/v1/memd.grpc.pb.h"

namespace {

using memd_bench::die;
using memd_bench::now_ns;

constexpr const char* kUsage =
    "usage: bench_lease_batching --socket PATH [--region NAME] [--min-size B] [--max-size B]\n"
    "                            [--live N] [--pairs N] [--warmup N] [--threads T] [--seed S]\n";

struct Options {
  std::string socket;
  std::string region = "lease-batching";
  uint32_t min_size = 16;
  uint32_t max_size = 512;
  uint32_t live = 4096;
  uint64_t pairs = 10000000;
  uint64_t warmup = 1000000;
  uint32_t threads = 1;
  uint64_t seed = 42;
};

// Counts the daemon keeps for this process in the region.
struct DaemonCounts {
  uint64_t lease_rpcs = 0;   // every lease call on the region (all its clients: here only this process)
  uint64_t lease_calls = 0;  // Leases.Lease calls of this process alone (the rest are releases and runs)
  uint64_t blocks = 0;       // blocks this process holds now
};

DaemonCounts daemon_counts(memd::Client& client, memd::v1::Admin::Stub& admin, const std::string& region) {
  DaemonCounts out;
  absl::StatusOr<memd::client::DaemonConnection::Current> cur = client.connection()->current();
  if (!cur.ok()) die("no session: " + cur.status().ToString());
  memd::v1::StatRegionRequest req;
  req.set_name(region);
  memd::v1::RegionInfo info;
  grpc::ClientContext ctx;
  client.connection()->set_deadline(&ctx);
  grpc::Status s = cur->regions->Stat(&ctx, req, &info);
  if (!s.ok()) die("Regions.Stat: " + s.error_message());
  out.lease_rpcs = info.lease_rpcs();
  memd::v1::ListClientsResponse clients;
  grpc::ClientContext actx;
  client.connection()->set_deadline(&actx);
  s = admin.ListClients(&actx, memd::v1::ListClientsRequest(), &clients);
  if (!s.ok()) die("Admin.ListClients: " + s.error_message());
  for (const memd::v1::ClientInfo& c : clients.clients()) {
    if (c.pid() != getpid()) continue;
    for (const memd::v1::ClientLeaseInfo& l : c.leases()) {
      if (l.region() != region) continue;
      out.lease_calls = l.leases();
      out.blocks = l.blocks();
    }
  }
  return out;
}

void remove_region(memd::Client& client, const std::string& region) {
  absl::StatusOr<memd::client::DaemonConnection::Current> cur = client.connection()->current();
  if (!cur.ok()) return;
  memd::v1::RemoveRegionRequest req;
  req.set_session(cur->session);
  req.set_name(region);
  memd::v1::RemoveRegionResponse resp;
  grpc::ClientContext ctx;
  client.connection()->set_deadline(&ctx);
  grpc::Status s = cur->regions->Remove(&ctx, req, &resp);
  if (!s.ok()) std::fprintf(stderr, "bench_lease_batching: Regions.Remove: %s\n", s.error_message().c_str());
}

struct Slot {
  void* p = nullptr;
  uint64_t tag = 0;
  uint32_t size = 0;
};

// One thread's churn. `phase` is called (by every thread together) after
// the fill, after the warm-up and after the measured part.
template <class Phase>
uint64_t churn(const Options& o, memd::Region& region, uint32_t index, Phase phase) {
  wl::Rng rng(o.seed * 0x9E3779B97F4A7C15ull + index + 1);
  std::vector<Slot> ring(o.live);
  uint64_t checksum = 0;
  auto place = [&](Slot& s) {
    s.size = static_cast<uint32_t>(rng.range(o.min_size, o.max_size));
    s.tag = rng.next();
    s.p = region.alloc(s.size);
    if (s.p == nullptr) die("the region is out of memory");
    std::memcpy(s.p, &s.tag, sizeof s.tag);
    static_cast<unsigned char*>(s.p)[s.size - 1] = static_cast<unsigned char>(s.tag);
  };
  auto step = [&] {
    Slot& s = ring[rng.below(o.live)];
    uint64_t tag;
    std::memcpy(&tag, s.p, sizeof tag);
    if (tag != s.tag || static_cast<unsigned char*>(s.p)[s.size - 1] != static_cast<unsigned char>(s.tag))
      die("an object changed while it was live (heap corruption)");
    checksum = wl::mix(checksum, tag);
    region.free(s.p);
    place(s);
  };
  for (Slot& s : ring) place(s);
  phase();
  for (uint64_t i = 0; i < o.warmup; ++i) step();
  phase();
  for (uint64_t i = 0; i < o.pairs; ++i) step();
  phase();
  for (Slot& s : ring) region.free(s.p);
  return checksum;
}

int run(const Options& o) {
  memd::ClientOptions co;
  co.socket = o.socket;
  co.program = "bench_lease_batching";
  absl::StatusOr<std::unique_ptr<memd::Client>> connected = memd::Client::connect(co);
  if (!connected.ok()) die("connect: " + connected.status().ToString());
  memd::Client& client = **connected;
  const std::string name = o.region + "-" + std::to_string(getpid());
  memd::OpenOptions oo;
  oo.discipline = memd::Discipline::kShm;
  oo.exclusive = true;
  oo.max_bytes = size_t{1} << 30;
  absl::StatusOr<std::unique_ptr<memd::Region>> region = client.open(name, oo);
  if (!region.ok()) die("open " + name + ": " + region.status().ToString());

  // Counts at each phase boundary, taken by the last thread to arrive.
  // Admin calls need no session: a channel of their own.
  auto admin = memd::v1::Admin::NewStub(grpc::CreateChannel("unix:" + o.socket, grpc::InsecureChannelCredentials()));
  uint64_t calls[3] = {};
  DaemonCounts daemon[3];
  int64_t at[3] = {};
  int phase_index = 0;
  std::barrier sync(static_cast<std::ptrdiff_t>(o.threads), [&]() noexcept {
    calls[phase_index] = client.lease_calls();
    daemon[phase_index] = daemon_counts(client, *admin, name);
    at[phase_index] = now_ns();
    ++phase_index;
  });
  uint64_t calls_before_fill = client.lease_calls();
  std::vector<uint64_t> checksums(o.threads);
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < o.threads; ++t) {
    threads.emplace_back([&, t] { checksums[t] = churn(o, **region, t, [&] { sync.arrive_and_wait(); }); });
  }
  for (std::thread& t : threads) t.join();
  uint64_t checksum = 0;
  for (uint64_t c : checksums) checksum = wl::mix(checksum, c);

  const uint64_t allocs = o.pairs * o.threads;
  const uint64_t steady = calls[2] - calls[1];
  const uint64_t daemon_steady = daemon[2].lease_rpcs - daemon[1].lease_rpcs;
  const uint64_t steady_leases = daemon[2].lease_calls - daemon[1].lease_calls;
  std::printf("min_size=%u max_size=%u live=%u threads=%u warmup=%" PRIu64 " pairs=%" PRIu64 " allocs=%" PRIu64
              " fill_calls=%" PRIu64 " warmup_calls=%" PRIu64 " steady_calls=%" PRIu64 " daemon_steady_calls=%" PRIu64
              " steady_lease_calls=%" PRIu64 " steady_other_calls=%" PRIu64 " blocks_held=%" PRIu64
              " allocs_per_call=%.1f ns_per_pair=%.2f checksum=%016" PRIx64 "\n",
              o.min_size, o.max_size, o.live, o.threads, o.warmup, o.pairs, allocs, calls[0] - calls_before_fill,
              calls[1] - calls[0], steady, daemon_steady, steady_leases, daemon_steady - steady_leases,
              daemon[2].blocks,
              static_cast<double>(allocs) / static_cast<double>(steady == 0 ? 1 : steady),
              static_cast<double>(at[2] - at[1]) / static_cast<double>(o.pairs), checksum);
  region->reset();
  remove_region(client, name);
  return steady == daemon_steady ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  memd_bench::Args args(argc, argv, kUsage);
  args.only({"socket", "region", "min-size", "max-size", "live", "pairs", "warmup", "threads", "seed"});
  Options o;
  o.socket = args.text("socket", "");
  o.region = args.text("region", o.region);
  o.min_size = static_cast<uint32_t>(args.number("min-size", o.min_size));
  o.max_size = static_cast<uint32_t>(args.number("max-size", o.max_size));
  o.live = static_cast<uint32_t>(args.number("live", o.live));
  o.pairs = args.number("pairs", o.pairs);
  o.warmup = args.number("warmup", o.warmup);
  o.threads = static_cast<uint32_t>(args.number("threads", o.threads));
  o.seed = args.number("seed", o.seed);
  if (o.socket.empty() || o.min_size < 8 || o.max_size < o.min_size || o.live < 1 || o.pairs < 1 || o.threads < 1)
    args.bad();
  return run(o);
}
