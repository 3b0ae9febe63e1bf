// memd::Client: a process's connection to memd, the daemon. Regions opened
// through it are memd::Region objects like any other: allocation and free
// run locally in shared memory, and blocks come from the daemon over gRPC in
// batches (with a stash of spare blocks), so that steady state needs few
// calls.
//
//   auto client = memd::Client::connect();            // $MEMD_SOCKET or the default
//   auto region = (*client)->open("jobs", {.discipline = memd::Discipline::kFile});
//   auto* q = (*region)->find_or_construct<Queue>("queue");
//
// The client keeps one session with the daemon (a stream): the daemon learns
// at once when the process dies and takes its blocks back. If the daemon
// restarts, the client reconnects and resumes its leases; its mappings and
// blocks stay as they were, and calls wait (up to reconnect_timeout) for the
// daemon to come back.
//
// A Client must outlive the regions opened through it. It is not usable in
// a child made by fork() (gRPC is not): a child connects anew.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "region/region.h"
#include "client/telemetry/sampling_default.h"

namespace memd {

// What the client tells the daemon about its allocations (docs/metrics.md):
// counters per region and size class, and sampled allocations with their
// call stacks, sent on the session about once per `interval`. Environment
// variables override these: MEMD_TELEMETRY=0|1, MEMD_SAMPLE_BYTES,
// MEMD_TELEMETRY_INTERVAL_MS.
struct TelemetryOptions {
  bool enabled = true;
  uint64_t sample_bytes = client::telemetry::kDefaultSampleBytes;  // mean bytes between samples; 0: no sampling
  std::chrono::milliseconds interval{1000};
};

struct ClientOptions {
  std::string socket;  // empty: default_socket()
  std::string program;  // shown by memdctl; empty: this program's name
  std::chrono::milliseconds call_deadline{10000};      // every unary call
  std::chrono::milliseconds reconnect_timeout{30000};  // how long calls wait for a restarting daemon
  TelemetryOptions telemetry;
};

struct OpenOptions {
  // Opening: must match, or set `any_discipline` to accept what the region
  // is. Creating: the region's discipline (shm, file or pmem); with
  // `any_discipline`, what an existing region is is accepted and a new one
  // is made with this one.
  Discipline discipline = Discipline::kShm;
  bool any_discipline = false;
  // Opening: must match, or Method{} to accept what the region is.
  // Creating: Method{} is best.
  Method method = Method{};
  bool create = true;      // create the region if it does not exist
  bool exclusive = false;  // with create: fail if it exists
  size_t max_bytes = 0;    // creating: the reservation (0: the daemon's default)
  uint32_t max_clients = 0;
  uint32_t max_threads = 0;
  uint32_t mode = 0;       // creating: permission bits (0: 0600)
  bool read_only = false;  // map read-only, lease nothing
};

namespace client {
class DaemonConnection;
}

class Client {
 public:
  static absl::StatusOr<std::unique_ptr<Client>> connect(const ClientOptions& options = {});
  // $MEMD_SOCKET, else the daemon's default (region/socket_paths.h
  // client_socket_path(): the user's socket, else the system daemon's)
  // (the daemon's defaults).
  static std::string default_socket();
  ~Client();

  absl::StatusOr<std::unique_ptr<Region>> open(std::string_view name, const OpenOptions& options = {});

  uint64_t session() const;
  // Lease calls made so far (Lease, Release, runs): allocations per call is
  // what the batching buys.
  uint64_t lease_calls() const;
  // Sessions opened (1 + reconnects after daemon restarts).
  uint64_t sessions_opened() const;
  client::DaemonConnection* connection() const { return connection_.get(); }

 private:
  explicit Client(std::shared_ptr<client::DaemonConnection> c) : connection_(std::move(c)) {}
  // One OpenRegion call (retried across a daemon restart).
  absl::StatusOr<std::unique_ptr<Region>> open_once(std::string_view name, const OpenOptions& options);
  std::shared_ptr<client::DaemonConnection> connection_;
};

}  // namespace memd
