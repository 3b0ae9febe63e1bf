#include "daemon/metrics.h"

#include <sys/stat.h>

#include <algorithm>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>

#include "absl/strings/str_cat.h"
#include "region/lease_service.h"
#include "daemon/clock.h"
#include "daemon/version.h"

namespace memd::daemon {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

class Families {
 public:
  MetricFamily& family(const char* name, const char* help, MetricType type) {
    auto it = std::find_if(out_.begin(), out_.end(), [&](const MetricFamily& f) { return f.name == name; });
    if (it != out_.end()) return *it;
    MetricFamily& f = out_.emplace_back();
    f.name = name;
    f.help = help;
    f.type = type;
    return f;
  }
  void gauge(const char* name, const char* help, Labels labels, double v) {
    ClientMetric& m = family(name, help, MetricType::Gauge).metric.emplace_back();
    m.label = std::move(labels);
    m.gauge.value = v;
  }
  void counter(const char* name, const char* help, Labels labels, double v) {
    ClientMetric& m = family(name, help, MetricType::Counter).metric.emplace_back();
    m.label = std::move(labels);
    m.counter.value = v;
  }
  std::vector<MetricFamily> take() { return std::move(out_); }

 private:
  std::vector<MetricFamily> out_;
};

void collect_regions(DaemonState* state, Families* f) {
  std::vector<std::shared_ptr<ServedRegion>> regions = state->regions->list();
  f->gauge("memd_regions", "Regions the daemon serves.", {}, static_cast<double>(regions.size()));
  double damaged = 0;
  for (const auto& r : regions) damaged += r->damaged.load(std::memory_order_acquire);
  f->gauge("memd_regions_damaged",
           "Regions listed but not served: their backing was truncated or had no page where one was needed, or "
           "they could not be opened at start (memdctl regions shows why).",
           {}, damaged);
  f->counter("memd_region_header_repairs_total",
             "Times a served region's header, overwritten by a process that maps it, was restored from the daemon's "
             "copy (the region is served on).",
             {}, static_cast<double>(region_header_repairs_total()));
  for (const auto& r : regions) {
    Labels l{{"region", r->record.name}};
    f->gauge("memd_region_capacity_bytes", "The region's reservation of data pages, in bytes.", l,
             static_cast<double>(r->record.max_bytes));
    f->gauge("memd_region_clients", "Clients attached to the region.", l, r->attached.load());
    f->counter("memd_region_lease_rpcs_total", "Lease RPCs for the region since the daemon started.", l,
               static_cast<double>(r->lease_rpcs.load()));
    f->counter("memd_region_lease_replays_total",
               "Repeated lease requests (a client retrying after a lost answer) answered from the journal.", l,
               static_cast<double>(r->replayed_requests.load()));
    f->counter("memd_region_grants_taken_back_total",
               "Lease grants taken back because their caller had gone (cancelled, or past its deadline).", l,
               static_cast<double>(r->grants_taken_back.load()));
    struct stat sb {};
    if (stat(object_os_path(r->record).c_str(), &sb) == 0) {
      f->gauge("memd_region_backing_bytes", "Bytes allocated in the region's backing file or shm object.", l,
               static_cast<double>(sb.st_blocks) * 512);
      f->gauge("memd_region_object_length_bytes",
               "Length of the region's backing object: it grows online as pages are used, and shrinks at compaction.", l,
               static_cast<double>(sb.st_size));
    }
    std::lock_guard<std::mutex> g(r->lock);
    if (!r->usable().ok()) continue;
    Region::HeaderFacts h = r->owner->header_facts();
    heap::RegionStats st = r->owner->stat();
    double page = heap::kPageSize;
    double in_blocks = static_cast<double>(st.pages_in_use) * page;
    f->gauge("memd_region_resident_bytes", "Bytes of the region's mapping in memory now (mincore).", l,
             static_cast<double>(r->owner->resident_bytes()));
    f->gauge("memd_region_in_blocks_bytes", "Bytes of pages in blocks and huge runs.", l, in_blocks);
    f->gauge("memd_region_leased_bytes", "Bytes of pages in blocks that clients hold now.", l,
             static_cast<double>(st.pages_owned) * page);
    f->gauge("memd_region_in_use_bytes", "Usable bytes of live objects.", l, static_cast<double>(st.busy_bytes));
    f->gauge("memd_region_free_bytes", "Bytes of the reservation not in blocks.", l,
             std::max(0.0, static_cast<double>(r->record.max_bytes) - in_blocks));
    f->gauge("memd_region_discarded_bytes", "Bytes of free pages given back to the system.", l,
             static_cast<double>(st.pages_discarded) * page);
    f->gauge("memd_region_fragmentation_ratio", "1 - in_use / in_blocks: block pages not holding live objects.", l,
             in_blocks > 0 ? std::max(0.0, 1.0 - static_cast<double>(st.busy_bytes) / in_blocks) : 0.0);
    f->gauge("memd_region_objects", "Live objects in the region.", l, static_cast<double>(st.busy_objects));
    uint64_t leased = 0, dead = 0;
    for (uint32_t i = 0; i < h.max_clients; ++i) {
      Region::LeaseSlotFacts s = r->owner->lease_slot(i);
      leased += r->leases()->blocks_held(i);  // the daemon's ledger, not the writable lease table
      if (s.active && region::process_start_time(s.pid) != s.start_time) ++dead;
    }
    f->gauge("memd_region_blocks", "Blocks by state: leased to clients, abandoned (waiting for adoption).",
             {{"region", r->record.name}, {"state", "leased"}}, static_cast<double>(leased));
    f->gauge("memd_region_blocks", "Blocks by state: leased to clients, abandoned (waiting for adoption).",
             {{"region", r->record.name}, {"state", "abandoned"}},
             static_cast<double>(r->owner->abandoned_blocks()));
    f->gauge("memd_region_dead_client_leases", "Lease slots held by processes that no longer run.", l,
             static_cast<double>(dead));
    f->counter("memd_region_recoveries_total", "Opens of the region that repaired a crash.", l,
               static_cast<double>(h.recoveries));
    f->counter("memd_region_leaked_objects_total", "Objects of the region lost in crashes.", l,
               static_cast<double>(h.leaked_objects));
  }
}

std::string client_label(const std::string& program, pid_t pid) { return absl::StrCat(program, ":", pid); }

// A client's call-chain pools: how its classifier decided, and one series
// per pool (at most TelemetryStore::kMaxChainPools) naming its chain.
void collect_chain_pools(const std::string& client, const ClientTelemetry& c, Families* f) {
  const char* help = "Call chains the client's classifier decided, by outcome.";
  const std::pair<const char*, uint64_t> outcomes[] = {{"pooled", c.chains.pooled},
                                                       {"wrapper", c.chains.wrappers},
                                                       {"mixed_sizes", c.chains.mixed_sizes},
                                                       {"past_pools", c.chains.past_pools}};
  for (const auto& [outcome, n] : outcomes) {
    f->counter("memd_client_chains_total", help, {{"client", client}, {"outcome", outcome}}, static_cast<double>(n));
  }
  f->counter("memd_client_chains_seen_total", "Call chains the client's classifier counted.", {{"client", client}},
             static_cast<double>(c.chains.seen));
  f->counter("memd_client_chain_unwinds_total", "Stack unwinds the client's classifier made.", {{"client", client}},
             static_cast<double>(c.chains.unwinds));
  f->counter("memd_client_chains_untracked_total", "Call chains the client's classifier had no room to count.",
             {{"client", client}}, static_cast<double>(c.chains.untracked));
  for (const PooledChain& p : c.pools) {
    f->gauge("memd_client_chain_pool_info", "A pool of the client's and the call chain it serves.",
             {{"client", client},
              {"pool", std::to_string(p.pool)},
              {"object_bytes", std::to_string(p.object_bytes)},
              {"chain", p.chain}},
             1);
  }
}

void collect_clients(DaemonState* state, Families* f) {
  std::vector<std::shared_ptr<Session>> sessions = state->sessions->list();
  std::map<uint64_t, std::string> label_of;
  for (const auto& s : sessions) {
    std::string client = client_label(s->program, s->peer.pid);
    label_of[s->id] = client;
    f->gauge("memd_client_info", "A connected client process.",
             {{"client", client}, {"program", s->program}, {"pid", std::to_string(s->peer.pid)},
              {"uid", std::to_string(s->peer.uid)}},
             1);
    uint64_t lease_rpcs = 0;
    for (const auto& [h, a] : state->sessions->attachments(*s)) {
      std::lock_guard<std::mutex> g(a.region->lock);
      if (!a.region->usable().ok() || a.slot == kNoLeaseSlot) continue;
      lease_rpcs += a.region->owner->lease_slot(a.slot).lease_calls;
      f->gauge("memd_client_leased_blocks", "Blocks leased to the client now.",
               {{"client", client}, {"region", a.region->record.name}},
               static_cast<double>(a.region->leases()->blocks_held(a.slot)));
    }
    f->counter("memd_client_lease_rpcs_total", "Lease RPCs the daemon served for the client.", {{"client", client}},
               static_cast<double>(lease_rpcs));
  }
  if (state->telemetry == nullptr) return;
  for (const ClientTelemetry& c : state->telemetry->clients()) {
    auto it = label_of.find(c.who.session);
    if (it == label_of.end()) continue;  // the session just ended
    const std::string& client = it->second;
    Labels l{{"client", client}};
    f->counter("memd_client_rpcs_total", "RPCs the client made (its own count).", l, static_cast<double>(c.rpcs));
    f->counter("memd_client_samples_total", "Allocations the client sampled.", l,
               static_cast<double>(c.samples_taken));
    f->counter("memd_client_telemetry_dropped_total", "Telemetry the client dropped.",
               {{"client", client}, {"kind", "samples"}}, static_cast<double>(c.samples_dropped));
    f->counter("memd_client_telemetry_dropped_total", "Telemetry the client dropped.",
               {{"client", client}, {"kind", "reports"}}, static_cast<double>(c.reports_dropped));
    for (const auto& [region, t] : c.by_region) {
      Labels rl{{"client", client}, {"region", region}};
      double live = static_cast<double>(t.allocated_bytes) - static_cast<double>(t.freed_bytes);
      f->gauge("memd_client_live_bytes", "Bytes the client allocated minus bytes it freed.", rl, std::max(0.0, live));
      f->counter("memd_client_allocations_total", "Objects the client allocated.", rl,
                 static_cast<double>(t.allocations));
      f->counter("memd_client_frees_total", "Objects the client freed.", rl, static_cast<double>(t.frees));
      f->counter("memd_client_allocated_bytes_total", "Bytes the client allocated.", rl,
                 static_cast<double>(t.allocated_bytes));
      f->counter("memd_client_freed_bytes_total", "Bytes the client freed.", rl, static_cast<double>(t.freed_bytes));
    }
    if (c.chain_pools) collect_chain_pools(client, c, f);
  }
}

void collect_telemetry(DaemonState* state, Families* f) {
  if (state->telemetry == nullptr) return;
  f->counter("memd_telemetry_reports_total", "Telemetry reports received.", {},
             static_cast<double>(state->telemetry->reports_total()));
  f->counter("memd_telemetry_samples_total", "Sampled allocations received.", {},
             static_cast<double>(state->telemetry->samples_total()));
  auto rejected = state->telemetry->rejected();
  for (size_t i = 0; i < rejected.size(); ++i) {
    f->counter("memd_telemetry_rejected_total",
               "Parts of telemetry reports left out, by reason (docs/metrics.md lists them).",
               {{"reason", rejected_label(static_cast<Rejected>(i))}}, static_cast<double>(rejected[i]));
  }
  f->gauge("memd_telemetry_stored_bytes", "Bytes the daemon holds for sampled allocations and their symbols.", {},
           static_cast<double>(state->telemetry->stored_bytes()));
  for (const auto& [key, t] : state->telemetry->class_totals()) {
    Labels l{{"region", key.first}, {"size_class", key.second}};
    f->counter("memd_size_class_allocations_total", "Objects allocated, by size class.", l,
               static_cast<double>(t.allocations));
    f->counter("memd_size_class_frees_total", "Objects freed, by size class.", l, static_cast<double>(t.frees));
    f->counter("memd_size_class_allocated_bytes_total", "Bytes allocated, by size class.", l,
               static_cast<double>(t.allocated_bytes));
  }
  auto live = [state](const std::string& region, uint64_t offset) {
    return region_object_live(state, region, offset);
  };
  for (const SiteTotals& s : state->telemetry->top_sites(10, live)) {
    Labels l{{"region", s.region}, {"site", s.site}};
    f->gauge("memd_allocation_site_inuse_bytes", "Estimated live bytes allocated at the site (top 10 per region).",
             l, s.inuse_bytes);
    f->gauge("memd_allocation_site_inuse_objects",
             "Estimated live objects allocated at the site (top 10 per region).", l, s.inuse_objects);
    f->gauge("memd_allocation_site_allocated_bytes",
             "Estimated bytes allocated at the site since the daemon started (top 10 per region).", l,
             s.allocated_bytes);
  }
}

void collect_daemon(DaemonState* state, Families* f) {
  f->gauge("memd_build_info", "The daemon's version.", {{"version", kVersion}}, 1);
  f->gauge("memd_start_time_seconds", "When the daemon started, in Unix time.", {},
           static_cast<double>(state->started_ms) / 1000.0);
  uint32_t connected = static_cast<uint32_t>(state->sessions->list().size());
  f->gauge("memd_sessions", "Client sessions by state.", {{"state", "connected"}}, connected);
  f->gauge("memd_sessions", "Client sessions by state.", {{"state", "orphaned"}},
           static_cast<double>(state->sessions->orphan_count()));
  f->counter("memd_sessions_opened_total", "Sessions opened since the daemon started.", {},
             static_cast<double>(state->sessions->sessions_total()));
  f->gauge("memd_connections", "Client connections open on the daemon's socket.", {},
           static_cast<double>(state->peers->size()));
  f->counter("memd_connections_closed_total", "Connections the daemon closed, by reason (docs/metrics.md).",
             {{"reason", "handshake_timeout"}}, static_cast<double>(state->peers->silent_total()));
  f->counter("memd_connections_closed_total", "Connections the daemon closed, by reason (docs/metrics.md).",
             {{"reason", "idle_timeout"}}, static_cast<double>(state->peers->idle_total()));
  for (const auto& [key, n] : state->rpc_stats.calls()) {
    f->counter("memd_rpcs_total", "RPCs handled, by method and status code.",
               {{"method", key.first}, {"code", key.second}}, static_cast<double>(n));
  }
  MetricFamily& hist = f->family("memd_lease_rpc_duration_seconds", "Time the daemon spent on lease RPCs.",
                                 MetricType::Histogram);
  for (const RpcStats::LatencyView& v : state->rpc_stats.lease_latency()) {
    ClientMetric& m = hist.metric.emplace_back();
    m.label = {{"method", v.method}};
    uint64_t cumulative = 0;
    for (size_t i = 0; i < kLatencyBuckets.size(); ++i) {
      cumulative += v.counts[i];
      m.histogram.bucket.push_back({cumulative, kLatencyBuckets[i]});
    }
    cumulative += v.counts.back();
    m.histogram.bucket.push_back({cumulative, std::numeric_limits<double>::infinity()});
    m.histogram.sample_count = cumulative;
    m.histogram.sample_sum = v.sum_seconds;
  }
}

}  // namespace

class MetricsCollector final : public prometheus::Collectable {
 public:
  explicit MetricsCollector(DaemonState* state) : state_(state) {}
  std::vector<MetricFamily> Collect() const override {
    std::lock_guard<std::mutex> g(mu_);
    if (state_ == nullptr) return {};
    Families f;
    collect_daemon(state_, &f);
    collect_regions(state_, &f);
    collect_clients(state_, &f);
    collect_telemetry(state_, &f);
    return f.take();
  }

 void stop() {
    std::lock_guard<std::mutex> g(mu_);
    state_ = nullptr;
  }

 private:
  mutable std::mutex mu_;  // a scrape runs to its end before stop returns
  DaemonState* state_;
};

bool region_object_live(DaemonState* state, const std::string& region, uint64_t offset) {
  std::shared_ptr<ServedRegion> r = state->regions->find(region);
  if (r == nullptr) return false;
  std::lock_guard<std::mutex> g(r->lock);
  if (!r->usable().ok()) return false;
  return r->owner->object_starts_at(offset);
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::start(const std::string& address, DaemonState* state) {
  std::unique_ptr<MetricsServer> m(new MetricsServer());
  try {
    m->exposer_ = std::make_unique<prometheus::Exposer>(address, 2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics at ", address, ": ", e.what()));
  }
  m->collector_ = std::make_shared<MetricsCollector>(state);
  m->exposer_->RegisterCollectable(m->collector_);
  std::vector<int> ports = m->exposer_->GetListeningPorts();
  std::string host = address.substr(0, address.rfind(':'));
  m->bound_ = ports.empty() ? address : absl::StrCat(host, ":", ports.front());
  return m;
}

MetricsServer::~MetricsServer() = default;

void MetricsServer::stop_collecting() { collector_->stop(); }

void MetricsServer::stop_in_background(std::unique_ptr<MetricsServer> server) {
  if (server == nullptr) return;
  server->stop_collecting();
  std::thread([s = std::move(server)]() mutable { s.reset(); }).detach();
}

}  // namespace memd::daemon
