// DaemonConnection's telemetry: a thread that, every interval, gathers the
// counters of each region this process has open (and of the shim's process
// heap), drains the sampled allocations and sends one TelemetryReport on the
// session stream. Nothing here is on an allocation path: malloc only
// touches counters and, for a sample, the sampler's bounded buffer.
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/types/span.h"

#include "client/daemon_connection.h"
#include "region/options.h"
#include "client/telemetry/report_builder.h"
#include "client/telemetry/sampler.h"

namespace memd::client {
namespace {

// A full drain of the shim's sampler and of this library's.
constexpr size_t kReportEventCapacity = 2 * telemetry::kSampleBufferEvents;

}  // namespace

void apply_telemetry_environment(TelemetryOptions* t) {
  region::TelemetrySettings env = region::telemetry_settings();
  if (env.enabled >= 0) t->enabled = env.enabled != 0;
  if (env.sample_bytes >= 0) t->sample_bytes = static_cast<uint64_t>(env.sample_bytes);
  if (env.interval_ms > 0) t->interval = std::chrono::milliseconds(env.interval_ms);
}

void DaemonConnection::set_telemetry(RegionLink* link, uintptr_t base,
                                     std::function<void(heap::CounterSnapshot*)> counters) {
  static std::atomic<uint64_t> next_instance{1};
  std::lock_guard<std::mutex> g(links_mu_);
  link->base = base;
  link->counters = std::move(counters);
  link->instance = next_instance.fetch_add(1, std::memory_order_relaxed);
}

void DaemonConnection::set_external_telemetry(ExternalTelemetry external) {
  std::lock_guard<std::mutex> g(links_mu_);
  external_ = std::move(external);
}

void DaemonConnection::report_loop() {
  telemetry::ReportBuilder builder;
  uint64_t report_epoch = 0;
  // Room for one drain of each sampler (the shim's and this library's),
  // allocated once and never zeroed: a report touches only the pages of the
  // events it carries. (A vector resized per report zeroed 2.5 MB each time.)
  std::unique_ptr<memd_sample_event[]> events(new memd_sample_event[kReportEventCapacity]);
  // Floor the interval: reports are bounded in rate whatever the setting
  // (flushes come only from closes and the process's exit).
  auto interval = std::max(options_.telemetry.interval, std::chrono::milliseconds(50));
  for (;;) {
    uint64_t asked;
    {
      std::unique_lock<std::mutex> g(mu_);
      changed_.wait_for(g, interval, [&] { return closing_ || flush_asked_ != flush_done_; });
      if (closing_) return;
      asked = flush_asked_;
    }
    bool written;
    {
      RpcGuard guard;
      written = send_report(&builder, &report_epoch, events.get());
    }
    {
      std::lock_guard<std::mutex> g(mu_);
      flush_done_ = asked;
      flush_written_ = written;
    }
    changed_.notify_all();
  }
}

bool DaemonConnection::flush_telemetry(std::chrono::milliseconds limit) {
  if (!telemetry_thread_.joinable() || getpid() != pid_ || std::this_thread::get_id() == telemetry_thread_.get_id()) {
    return false;
  }
  std::unique_lock<std::mutex> g(mu_);
  if (closing_) return false;
  uint64_t ticket = ++flush_asked_;
  changed_.notify_all();
  // A report under way when asked may miss counts made before: wait for one
  // that started after.
  if (!changed_.wait_for(g, limit, [&] { return flush_done_ >= ticket || closing_; })) return false;
  return flush_done_ >= ticket && flush_written_;
}

bool DaemonConnection::send_report(telemetry::ReportBuilder* builder, uint64_t* report_epoch,
                                   memd_sample_event* events) {
  std::vector<telemetry::HeapView> heaps;
  size_t event_count = 0;
  telemetry::ClientTotals totals;
  // The shim's pools if it has them on, else this library's own.
  telemetry::ChainPoolView chains;
  telemetry::SamplerCounts local = telemetry::sampler_counts();
  totals.samples_taken = local.taken;
  totals.samples_dropped = local.dropped;
  {
    std::lock_guard<std::mutex> g(links_mu_);
    for (RegionLink* l : links_) {
      if (!l->counters) continue;
      telemetry::HeapView& h = heaps.emplace_back();
      h.region = l->name;
      h.base = l->base;
      h.instance = l->instance;
      l->counters(&h.counters);
    }
    if (external_.counters) {
      telemetry::HeapView& h = heaps.emplace_back();
      h.base = external_.base;
      external_.counters(&h.counters);
    }
    if (external_.chain_pools) external_.chain_pools(&chains);
    if (external_.drain) event_count += external_.drain(events + event_count, telemetry::kSampleBufferEvents);
    if (external_.sampler_counts) {
      uint64_t taken = 0, dropped = 0;
      external_.sampler_counts(&taken, &dropped);
      totals.samples_taken += taken;
      totals.samples_dropped += dropped;
    }
  }
  event_count += telemetry::drain_sample_events(events + event_count, telemetry::kSampleBufferEvents);
  if (!chains.on) chains = telemetry::local_chain_pools();

  std::lock_guard<std::mutex> w(write_mu_);
  grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionEvent>* stream = nullptr;
  uint64_t epoch = 0;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (connected_) stream = stream_.get();
    epoch = epoch_;
  }
  if (stream == nullptr) {
    reports_dropped.fetch_add(1, std::memory_order_relaxed);
    lost_events_ += event_count;
    return false;
  }
  if (epoch != *report_epoch) {
    builder->new_session();
    *report_epoch = epoch;
  }
  totals.rpcs = rpcs.load(std::memory_order_relaxed);
  totals.lease_calls = lease_calls.load(std::memory_order_relaxed);
  totals.sample_period = telemetry::sampling_period_bytes() != 0 ? telemetry::sampling_period_bytes()
                                                                  : options_.telemetry.sample_bytes;
  totals.reports_dropped = reports_dropped.load(std::memory_order_relaxed);
  totals.samples_dropped += lost_events_;
  v1::SessionRequest req;
  *req.mutable_telemetry() = builder->build(heaps, absl::MakeConstSpan(events, event_count), totals, &chains);
  if (stream->Write(req)) {
    reports_sent.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  reports_dropped.fetch_add(1, std::memory_order_relaxed);
  lost_events_ += event_count;
  return false;
}

}  // namespace memd::client
