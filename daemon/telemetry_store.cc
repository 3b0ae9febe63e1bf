#include "daemon/telemetry_store.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace memd::daemon {
namespace {

std::string heap_label(const std::string& region) { return region.empty() ? kProcessHeapLabel : region; }

// How many allocations a sample of `size` bytes stands for (pprof's
// unsampling of a Poisson process with mean `period` bytes).
double sample_weight(uint64_t size, uint64_t period) {
  if (period == 0 || size == 0) return 1.0;
  double p = 1.0 - std::exp(-static_cast<double>(size) / static_cast<double>(period));
  return p > 0 ? 1.0 / p : 1.0;
}

std::string site_of(const std::vector<ProfileFrame>& stack) {
  for (const ProfileFrame& f : stack) {
    if (!f.function.empty()) return f.function;
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(f.address));
    return buf;
  }
  return "unknown";
}

// 0 (large), 1 (huge), or a segregated class: 16..504 in steps of 8.
bool valid_size_class(uint32_t c) {
  return c == 0 || c == 1 || (c >= 16 && c <= 8 * 63 && c % 8 == 0);
}

}  // namespace

std::string size_class_label(uint32_t size_class) {
  if (size_class == 0) return "large";
  if (size_class == 1) return "huge";
  return std::to_string(size_class);
}

void TelemetryStore::report(const ClientIdentity& who, const std::set<std::string>& reportable,
                            const v1::TelemetryReport& r) {
  auto known = [&](const std::string& region) { return region.empty() || reportable.count(region) > 0; };
  std::lock_guard<std::mutex> g(mu_);
  SessionData& s = sessions_[who.session];
  s.view.who = who;
  ++s.view.reports;
  ++reports_;
  // Counters: the latest cumulative values per heap; a heap the client no
  // longer reports (a closed region), or reports for a new opening (whose
  // counts start again from zero), is retired.
  std::map<std::string, std::map<uint32_t, ClassTotals>> latest;
  std::map<std::string, uint64_t> instances;
  for (const v1::HeapCounters& h : r.heaps()) {
    if (!known(h.region())) {
      ++rejected_;
      continue;
    }
    instances[heap_label(h.region())] = h.instance();
    auto& classes = latest[heap_label(h.region())];
    for (const v1::ClassCounters& c : h.classes()) {
      if (!valid_size_class(c.size_class())) {
        ++rejected_;
        continue;
      }
      ClassTotals& t = classes[c.size_class()];
      t.allocations += c.allocations();
      t.frees += c.frees();
      t.allocated_bytes += c.allocated_bytes();
      t.freed_bytes += c.freed_bytes();
    }
  }
  for (auto& [region, classes] : s.latest) {
    if (!latest.count(region) || instances[region] != s.instances[region]) retire(s, region);
  }
  s.latest = std::move(latest);
  s.instances = std::move(instances);
  s.view.by_region.clear();
  for (const auto& [region, classes] : s.latest) {
    ClassTotals& sum = s.view.by_region[region];
    for (const auto& [cls, t] : classes) sum.add(t);
  }
  s.view.rpcs = r.rpcs();
  s.view.lease_calls = r.lease_calls();
  s.view.samples_taken = r.samples_taken();
  s.view.samples_dropped = r.samples_dropped();
  s.view.reports_dropped = r.reports_dropped();
  // Symbols first: the samples of this report use them.
  for (const v1::Symbol& sym : r.symbols()) {
    if (s.symbols.size() >= kMaxSymbolsPerSession && !s.symbols.count(sym.address())) {
      ++rejected_;
      continue;
    }
    s.symbols[sym.address()] = sym.name().substr(0, kMaxSymbolBytes);
  }
  for (const v1::Sample& in : r.samples()) {
    if (!known(in.region())) {
      ++rejected_;
      continue;
    }
    add_sample(s, in, r.sample_period_bytes());
  }
  for (const v1::SampledFree& f : r.frees()) {
    std::pair<std::string, uint64_t> key{heap_label(f.region()), f.address()};
    if (auto it = s.live.find(key); it != s.live.end()) {
      it->second->live = false;
      s.live.erase(it);
      continue;
    }
    // An object of a shared region another process sampled: the free of a
    // marked chunk is reported by whichever process frees it. Only in a
    // region this session has had open.
    if (f.region().empty() || !known(f.region())) continue;
    for (auto& [id, other] : sessions_) {
      if (auto it = other.live.find(key); it != other.live.end()) {
        it->second->live = false;
        other.live.erase(it);
        break;
      }
    }
  }
}

void TelemetryStore::add_sample(SessionData& s, const v1::Sample& in, uint64_t period) {
  auto sample = std::make_shared<StoredSample>();
  sample->region = heap_label(in.region());
  sample->address = in.address();
  sample->requested = in.requested_bytes();
  sample->period = period;
  sample->pid = s.view.who.pid;
  sample->session = s.view.who.session;
  for (int i = 0; i < in.stack_size() && i < kMaxFrames; ++i) {
    uint64_t pc = in.stack(i);
    auto sym = s.symbols.find(pc);
    sample->stack.push_back({pc, sym != s.symbols.end() ? sym->second : std::string(), s.view.who.session});
  }
  ++samples_;
  auto key = std::make_pair(sample->region, sample->address);
  if (auto old = s.live.find(key); old != s.live.end()) old->second->live = false;  // freed unseen, reused
  s.live[key] = sample;
  s.samples.push_back(sample);
  if (s.samples.size() > kMaxSamplesPerSession) {
    // Freed samples go first (they only count in alloc_*), then the oldest,
    // down to 3/4 of the bound: a pass over the samples once in a quarter
    // of the bound's arrivals, not once per sample.
    std::erase_if(s.samples, [](const auto& x) { return !x->live; });
    while (s.samples.size() > kMaxSamplesPerSession * 3 / 4) {
      s.live.erase({s.samples.front()->region, s.samples.front()->address});
      s.samples.pop_front();
    }
  }
}

void TelemetryStore::retire(SessionData& s, const std::string& region) {
  auto it = s.latest.find(region);
  if (it == s.latest.end()) return;
  for (const auto& [cls, t] : it->second) retired_[region][cls].add(t);
}

void TelemetryStore::end_session(uint64_t session) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  SessionData& s = it->second;
  for (const auto& [region, classes] : s.latest) retire(s, region);
  for (const auto& sample : s.samples) {
    if (!sample->live || sample->region == kProcessHeapLabel) continue;
    auto& kept = kept_[sample->region];
    kept.push_back(sample);
    if (kept.size() > kMaxKeptSamplesPerRegion) kept.pop_front();
  }
  sessions_.erase(it);
}

void TelemetryStore::forget_region(const std::string& region) {
  std::lock_guard<std::mutex> g(mu_);
  retired_.erase(region);
  kept_.erase(region);
  for (auto& [id, s] : sessions_) {
    for (auto& sample : s.samples) {
      if (sample->region == region) sample->live = false;
    }
  }
}

std::map<std::pair<std::string, std::string>, ClassTotals> TelemetryStore::class_totals() const {
  std::lock_guard<std::mutex> g(mu_);
  std::map<std::pair<std::string, std::string>, ClassTotals> out;
  for (const auto& [region, classes] : retired_) {
    for (const auto& [cls, t] : classes) out[{region, size_class_label(cls)}].add(t);
  }
  for (const auto& [id, s] : sessions_) {
    for (const auto& [region, classes] : s.latest) {
      for (const auto& [cls, t] : classes) out[{region, size_class_label(cls)}].add(t);
    }
  }
  return out;
}

std::vector<ClientTelemetry> TelemetryStore::clients() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<ClientTelemetry> out;
  for (const auto& [id, s] : sessions_) out.push_back(s.view);
  return out;
}

std::vector<std::shared_ptr<TelemetryStore::StoredSample>> TelemetryStore::samples_locked(const std::string& region,
                                                                                          pid_t pid) const {
  std::vector<std::shared_ptr<StoredSample>> out;
  auto wanted = [&](const StoredSample& x) {
    return (region.empty() || x.region == region) && (pid == 0 || x.pid == pid);
  };
  for (const auto& [id, s] : sessions_) {
    for (const auto& x : s.samples) {
      if (wanted(*x)) out.push_back(x);
    }
  }
  for (const auto& [name, kept] : kept_) {
    for (const auto& x : kept) {
      if (wanted(*x)) out.push_back(x);
    }
  }
  return out;
}

std::vector<SiteTotals> TelemetryStore::top_sites(size_t k, const LiveCheck& live) const {
  std::vector<std::shared_ptr<StoredSample>> all;
  {
    std::lock_guard<std::mutex> g(mu_);
    all = samples_locked("", 0);
  }
  std::map<std::pair<std::string, std::string>, SiteTotals> sites;
  for (const auto& x : all) {
    SiteTotals& t = sites[{x->region, site_of(x->stack)}];
    t.region = x->region;
    t.site = site_of(x->stack);
    double w = sample_weight(x->requested, x->period);
    t.allocated_bytes += w * static_cast<double>(x->requested);
    bool is_live = x->live && (x->region == kProcessHeapLabel || !live || live(x->region, x->address));
    if (is_live) {
      t.inuse_bytes += w * static_cast<double>(x->requested);
      t.inuse_objects += w;
    }
  }
  std::map<std::string, std::vector<SiteTotals>> by_region;
  for (auto& [key, t] : sites) by_region[t.region].push_back(t);
  std::vector<SiteTotals> out;
  for (auto& [region, list] : by_region) {
    std::sort(list.begin(), list.end(), [](const SiteTotals& a, const SiteTotals& b) {
      return a.inuse_bytes != b.inuse_bytes ? a.inuse_bytes > b.inuse_bytes : a.allocated_bytes > b.allocated_bytes;
    });
    if (list.size() > k) list.resize(k);
    out.insert(out.end(), list.begin(), list.end());
  }
  return out;
}

ProfileInput TelemetryStore::profile_input(const std::string& region, pid_t pid, const LiveCheck& live) const {
  std::vector<std::shared_ptr<StoredSample>> all;
  {
    std::lock_guard<std::mutex> g(mu_);
    all = samples_locked(region, pid);
  }
  ProfileInput in;
  for (const auto& x : all) {
    ProfileSample& p = in.samples.emplace_back();
    p.stack = x->stack;
    p.requested_bytes = x->requested;
    p.live = x->live && (x->region == kProcessHeapLabel || !live || live(x->region, x->address));
    in.sample_period_bytes = x->period;
  }
  return in;
}

uint64_t TelemetryStore::reports_total() const {
  std::lock_guard<std::mutex> g(mu_);
  return reports_;
}

uint64_t TelemetryStore::rejected_total() const {
  std::lock_guard<std::mutex> g(mu_);
  return rejected_;
}

uint64_t TelemetryStore::samples_total() const {
  std::lock_guard<std::mutex> g(mu_);
  return samples_;
}

}  // namespace memd::daemon
