// The daemon client's connection: one gRPC channel to the daemon's socket
// and one session stream, kept by a thread of its own. When the stream
// breaks (the daemon stopped or crashed), that thread reconnects with
// backoff and resumes every lease this process held; calls made meanwhile
// wait for it (up to the reconnect timeout) and are then retried.
#pragma once

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "client/daemon_client.h"
#include "client/telemetry/chain_pool_view.h"
#include "client/telemetry/telemetry_abi.h"
#include "heap/heap_counters.h"
#include "memd/v1/memd.grpc.pb.h"

namespace memd::client {
namespace telemetry {
class ReportBuilder;
}

// One region this process has open through the daemon.
struct RegionLink {
  std::string name;
  uint32_t slot = 0;                    // lease slot (kept across reconnects)
  std::atomic<uint32_t> handle{0};      // the daemon's handle; 0: the lease was lost
  std::function<void()> drain;          // gives spare blocks back (daemon's request)
  // Telemetry: where the region's data starts in this process, and its
  // thread heaps' counters.
  uintptr_t base = 0;
  std::function<void(heap::CounterSnapshot*)> counters;
  uint64_t instance = 0;  // unique in the process: counters restart with each opening
};

// Telemetry kept by another copy of the heap code in this process (the
// malloc shim's process heap, seen from its daemon link).
struct ExternalTelemetry {
  uintptr_t base = 0;  // the process heap's data
  std::function<void(heap::CounterSnapshot*)> counters;
  std::function<size_t(memd_sample_event*, size_t)> drain;
  std::function<void(uint64_t* taken, uint64_t* dropped)> sampler_counts;
  std::function<void(telemetry::ChainPoolView*)> chain_pools;  // the shim's call-chain pools
};

class DaemonConnection {
 public:
  static absl::StatusOr<std::shared_ptr<DaemonConnection>> connect(const ClientOptions& options);
  ~DaemonConnection();

  // The current session and stubs; waits while reconnecting (UNAVAILABLE
  // after the reconnect timeout).
  struct Current {
    uint64_t session = 0;
    uint64_t epoch = 0;  // changes with every new session
    v1::Regions::Stub* regions = nullptr;
    v1::Leases::Stub* leases = nullptr;
  };
  absl::StatusOr<Current> current();
  // A call on session `epoch` failed with UNAVAILABLE: waits for the next
  // session (or the timeout).
  void await_reconnect(uint64_t epoch);

  void add(RegionLink* link);
  void remove(RegionLink* link);
  void set_drain(RegionLink* link, std::function<void()> drain);
  void set_telemetry(RegionLink* link, uintptr_t base, std::function<void(heap::CounterSnapshot*)> counters);
  void set_external_telemetry(ExternalTelemetry external);
  // Has a report sent now (by the telemetry thread) and waits for it, up to
  // `limit`: for a region about to close, or a process about to exit, whose
  // counts since the last report would otherwise be lost. True if it was
  // written to the session stream in time. At once false without
  // telemetry, and in a forked child (the thread is the parent's).
  bool flush_telemetry(std::chrono::milliseconds limit);
  // How long a region's close or the connection's end waits for its last report.
  static constexpr std::chrono::milliseconds kLastReportWait{500};

  void set_deadline(grpc::ClientContext* ctx) const;
  std::atomic<uint64_t> lease_calls{0};
  std::atomic<uint64_t> sessions_opened{0};
  std::atomic<uint64_t> rpcs{0};             // calls to the daemon (each current())
  std::atomic<uint64_t> reports_sent{0};
  std::atomic<uint64_t> reports_dropped{0};  // no session to send them on

 private:
  explicit DaemonConnection(const ClientOptions& options) : options_(options) {}
  // Opens a session on a fresh channel; resumes the links' leases.
  absl::Status open_session();
  void run();  // reads commands; reconnects when the stream breaks
  void report_loop();  // sends telemetry every interval
  // Builds and writes one report; drops it (counted) without a session.
  // True if it was written.
  // `events` has room for a full drain of each sampler.
  bool send_report(telemetry::ReportBuilder* builder, uint64_t* report_epoch, memd_sample_event* events);

  ClientOptions options_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Sessions::Stub> sessions_stub_;
  std::unique_ptr<v1::Regions::Stub> regions_stub_;
  std::unique_ptr<v1::Leases::Stub> leases_stub_;
  std::unique_ptr<grpc::ClientContext> stream_ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionEvent>> stream_;
  uint64_t session_ = 0;
  uint64_t epoch_ = 0;
  bool connected_ = false;
  bool closing_ = false;
  pid_t pid_ = getpid();  // the process whose threads these are
  // Flushes asked for and done (report_loop); the outcome of the last one.
  uint64_t flush_asked_ = 0, flush_done_ = 0;
  bool flush_written_ = false;
  std::set<RegionLink*> links_;
  std::mutex links_mu_;  // held while a drain runs: a link is not removed under it
  std::thread thread_;
  std::thread telemetry_thread_;
  // Held while a report is written, and while the stream is finished or
  // replaced: a write never meets a dead stream.
  std::mutex write_mu_;
  ExternalTelemetry external_;  // under links_mu_
  uint64_t lost_events_ = 0;    // sample events in reports that were dropped (under write_mu_)
  // Old stubs stay alive until the connection ends: a call in flight on one
  // must not lose it.
  std::vector<std::shared_ptr<void>> retired_;
};

absl::Status from_grpc(const grpc::Status& s);

// MEMD_TELEMETRY, MEMD_SAMPLE_BYTES, MEMD_TELEMETRY_INTERVAL_MS over `t`.
void apply_telemetry_environment(TelemetryOptions* t);

// Called around every call to the daemon, process-wide (the malloc shim uses
// it to keep gRPC's own allocations out of the region being leased from).
void set_rpc_guard(void (*enter)(), void (*leave)());
struct RpcGuard {
  RpcGuard();
  ~RpcGuard();
  RpcGuard(const RpcGuard&) = delete;
  RpcGuard& operator=(const RpcGuard&) = delete;
};

}  // namespace memd::client
