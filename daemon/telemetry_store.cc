#include "daemon/telemetry_store.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <span>
#include <unordered_map>

#include "daemon/client_text.h"
#include "heap/size_class.h"

namespace memd::daemon {
namespace {

constexpr const char* kRejectedLabels[] = {"unknown_region",    "size_class",        "symbol_count",
                                           "session_bytes",     "uid_bytes",         "region_full",
                                           "counter_decreased", "counter_too_large", "counter_jump",
                                           "chain"};
static_assert(std::size(kRejectedLabels) == static_cast<size_t>(Rejected::kCount));

std::string heap_label(const std::string& region) { return region.empty() ? kProcessHeapLabel : region; }

uint64_t steady_ms() {
  using namespace std::chrono;
  return static_cast<uint64_t>(duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count());
}

// How many allocations a sample of `size` bytes stands for (pprof's
// unsampling of a Poisson process with mean `period` bytes).
double sample_weight(uint64_t size, uint64_t period) {
  if (period == 0 || size == 0) return 1.0;
  double p = 1.0 - std::exp(-static_cast<double>(size) / static_cast<double>(period));
  return p > 0 ? 1.0 / p : 1.0;
}

// 0 (large), 1 (huge), or the object size of a segregated class.
bool valid_size_class(uint32_t c) {
  return c == 0 || c == 1 || heap::SizeClasses::is_class_size(c);
}

// Strings made while the store's lock is held, each once, named by index.
class Strings {
 public:
  uint32_t index(const std::string& s) {
    auto [it, inserted] = index_.try_emplace(s, static_cast<uint32_t>(all_.size()));
    if (inserted) all_.push_back(s);
    return it->second;
  }
  const std::string& operator[](uint32_t i) const { return all_[i]; }

 private:
  std::vector<std::string> all_;
  std::unordered_map<std::string, uint32_t> index_;
};

// The site of a sample: the first frame the client named, else the first
// frame's address.
std::string site_of(const SamplePool& pool, const SamplePool::Sample& x) {
  for (const SamplePool::Frame& f : x.stack) {
    if (f.function != NameTable::kNone) return pool.name(f.function);
  }
  if (x.stack.empty()) return "unknown";
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(x.stack.front().address));
  return buf;
}

}  // namespace

std::string size_class_label(uint32_t size_class) {
  if (size_class == 0) return "large";
  if (size_class == 1) return "huge";
  return std::to_string(size_class);
}

const char* rejected_label(Rejected reason) { return kRejectedLabels[static_cast<size_t>(reason)]; }

void TelemetryStore::reject(CounterVerdict v) {
  switch (v) {
    case CounterVerdict::kDecreased: return reject(Rejected::kCounterDecreased);
    case CounterVerdict::kTooLarge: return reject(Rejected::kCounterTooLarge);
    case CounterVerdict::kJump: return reject(Rejected::kCounterJump);
    case CounterVerdict::kOk: return;
  }
}

void TelemetryStore::reject(SamplePool::Stored s) {
  switch (s) {
    case SamplePool::Stored::kOverCount: return reject(Rejected::kSymbolCount);
    case SamplePool::Stored::kOverBytes: return reject(Rejected::kSessionBytes);
    case SamplePool::Stored::kOverSharedBytes: return reject(Rejected::kUidBytes);
    case SamplePool::Stored::kYes: return;
  }
}

void TelemetryStore::report(const ClientIdentity& who, const std::set<std::string>& reportable,
                            const v1::TelemetryReport& r, uint64_t budget, uint64_t uid_budget) {
  const uint64_t now_ms = steady_ms();
  std::lock_guard<std::mutex> g(mu_);
  auto it = sessions_.find(who.session);
  if (it == sessions_.end()) {
    UidAccount& account = uids_[who.uid];
    if (account.sessions++ == 0) account.budget.max_bytes = uid_budget;
    it = sessions_.try_emplace(who.session, who.uid, budget, &account.budget).first;
  }
  SessionData& s = it->second;
  s.view.who = who;
  ++s.view.reports;
  ++reports_;
  report_counters(s, reportable, r, now_ms);
  report_scalars(s, r, now_ms);
  report_samples(s, reportable, r);
  report_chains(s, r, now_ms);
}

// Counters: the latest cumulative values per heap that pass the checks; a
// heap the client no longer reports (a closed region), or reports for a new
// opening (whose counts start again from zero), is retired. A class a report
// leaves out keeps its value (cumulative: absent is unchanged).
void TelemetryStore::report_counters(SessionData& s, const std::set<std::string>& reportable,
                                     const v1::TelemetryReport& r, uint64_t now_ms) {
  struct Reported {
    uint64_t instance = 0;
    std::map<uint32_t, ClassTotals> classes;
  };
  std::map<std::string, Reported> reported;
  for (const v1::HeapCounters& h : r.heaps()) {
    if (!h.region().empty() && reportable.count(h.region()) == 0) {
      reject(Rejected::kUnknownRegion);
      continue;
    }
    Reported& heap = reported[heap_label(h.region())];
    heap.instance = h.instance();
    for (const v1::ClassCounters& c : h.classes()) {
      if (!valid_size_class(c.size_class())) {
        reject(Rejected::kSizeClass);
        continue;
      }
      heap.classes[c.size_class()].add({c.allocations(), c.frees(), c.allocated_bytes(), c.freed_bytes()});
    }
  }
  for (auto it = s.latest.begin(); it != s.latest.end();) {
    auto now = reported.find(it->first);
    if (now != reported.end() && now->second.instance == it->second.instance) {
      ++it;
      continue;
    }
    retire(it->first, it->second);
    it = s.latest.erase(it);
  }
  for (const auto& [label, now] : reported) {
    Heap& heap = s.latest[label];
    heap.instance = now.instance;
    auto seen = s.reported_ms.find(label);
    for (const auto& [cls, totals] : now.classes) {
      std::optional<ClassTotals> before;
      uint64_t since = now_ms;
      if (auto prev = heap.classes.find(cls); prev != heap.classes.end()) {
        before = prev->second.totals;
        since = prev->second.at_ms;
      } else if (seen != s.reported_ms.end()) {
        before = ClassTotals{};  // a new opening of a heap reported before: from zero since then
        since = seen->second;
      }
      CounterVerdict v = check_class(before, totals, now_ms - since);
      if (v != CounterVerdict::kOk) {
        reject(v);  // the value before stands
        continue;
      }
      heap.classes[cls] = {totals, now_ms};
    }
    s.reported_ms[label] = now_ms;
  }
  s.view.by_region.clear();
  for (const auto& [label, heap] : s.latest) {
    ClassTotals& sum = s.view.by_region[label];
    for (const auto& [cls, c] : heap.classes) sum.add(c.totals);
  }
}

void TelemetryStore::take_scalar(Scalar& kept, uint64_t now, uint64_t now_ms, uint64_t* shown) {
  CounterVerdict v = check_counter(kept.value, now, now_ms - kept.at_ms, kMaxEventsPerSecond);
  if (v != CounterVerdict::kOk) return reject(v);
  kept = {now, now_ms};
  *shown = now;
}

void TelemetryStore::report_scalars(SessionData& s, const v1::TelemetryReport& r, uint64_t now_ms) {
  auto take = [&](Scalar& kept, uint64_t now, uint64_t& shown) { take_scalar(kept, now, now_ms, &shown); };
  take(s.rpcs, r.rpcs(), s.view.rpcs);
  take(s.lease_calls, r.lease_calls(), s.view.lease_calls);
  take(s.samples_taken, r.samples_taken(), s.view.samples_taken);
  take(s.samples_dropped, r.samples_dropped(), s.view.samples_dropped);
  take(s.reports_dropped, r.reports_dropped(), s.view.reports_dropped);
}

void TelemetryStore::report_samples(SessionData& s, const std::set<std::string>& reportable,
                                    const v1::TelemetryReport& r) {
  auto known = [&](const std::string& region) { return region.empty() || reportable.count(region) > 0; };
  // Symbols first: the samples of this report use them. Names end up in
  // labels and profiles: made safe here, once.
  for (const v1::Symbol& sym : r.symbols()) {
    reject(s.pool.add_symbol(sym.address(), client_text(sym.name(), kMaxSymbolBytes), kMaxSymbolsPerSession));
  }
  SamplePool::Sample fields;
  fields.pid = s.view.who.pid;
  fields.uid = s.view.who.uid;
  fields.session = s.view.who.session;
  fields.period = r.sample_period_bytes();
  for (const v1::Sample& in : r.samples()) {
    if (!known(in.region())) {
      reject(Rejected::kUnknownRegion);
      continue;
    }
    ++samples_;
    fields.address = in.address();
    fields.requested = in.requested_bytes();
    std::span<const uint64_t> stack(in.stack().data(), std::min<size_t>(in.stack_size(), kMaxFrames));
    SamplePool::Stored stored = s.pool.add(heap_label(in.region()), fields, stack);
    reject(stored);
    if (stored == SamplePool::Stored::kYes && !in.region().empty()) samplers_[in.region()].insert(fields.session);
  }
  for (const v1::SampledFree& f : r.frees()) {
    const std::string label = heap_label(f.region());
    if (s.pool.end(label, f.address())) continue;
    // An object of a shared region another process sampled: the free of a
    // marked chunk is reported by whichever process frees it. Only in a
    // region this session has had open.
    if (f.region().empty() || !known(f.region())) continue;
    bool ended = false;
    if (auto samplers = samplers_.find(label); samplers != samplers_.end()) {
      for (uint64_t id : samplers->second) {
        auto other = sessions_.find(id);
        if (other != sessions_.end() && (ended = other->second.pool.end(label, f.address()))) break;
      }
    }
    if (auto kept = kept_.find(label); !ended && kept != kept_.end()) kept->second.end(label, f.address());
  }
}

void TelemetryStore::retire(const std::string& region, const Heap& heap) {
  for (const auto& [cls, c] : heap.classes) retired_[region][cls].add(c.totals);
}

void TelemetryStore::end_session(uint64_t session, uint64_t budget) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  SessionData& s = it->second;
  for (const auto& [region, heap] : s.latest) retire(region, heap);
  for (const auto& sample : s.pool.samples()) {
    const std::string& heap = s.pool.name(sample->heap);
    if (!sample->live || heap == kProcessHeapLabel) continue;
    // Charged to no uid: the region's pool is bounded on its own.
    SamplePool& kept = kept_.try_emplace(heap, budget, kMaxKeptSamplesPerRegion).first->second;
    reject(Rejected::kRegionFull, kept.keep(s.pool, *sample));
  }
  for (auto& [region, ids] : samplers_) ids.erase(session);
  std::erase_if(samplers_, [](const auto& entry) { return entry.second.empty(); });
  const uint32_t uid = s.uid;
  sessions_.erase(it);  // and its pool, with every name and sample in it: its bytes go back to the uid
  auto account = uids_.find(uid);
  if (account != uids_.end() && --account->second.sessions == 0) uids_.erase(account);
}

void TelemetryStore::forget_region(const std::string& region) {
  std::lock_guard<std::mutex> g(mu_);
  retired_.erase(region);
  kept_.erase(region);
  samplers_.erase(region);
  for (auto& [id, s] : sessions_) s.pool.forget_heap(region);
}

std::map<std::pair<std::string, std::string>, ClassTotals> TelemetryStore::class_totals() const {
  std::lock_guard<std::mutex> g(mu_);
  std::map<std::pair<std::string, std::string>, ClassTotals> out;
  for (const auto& [region, classes] : retired_) {
    for (const auto& [cls, t] : classes) out[{region, size_class_label(cls)}].add(t);
  }
  for (const auto& [id, s] : sessions_) {
    for (const auto& [region, heap] : s.latest) {
      for (const auto& [cls, c] : heap.classes) out[{region, size_class_label(cls)}].add(c.totals);
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

template <class F>
void TelemetryStore::for_each_sample(const std::string& region, pid_t pid, std::optional<uint32_t> uid, F f) const {
  auto visit = [&](const SamplePool& pool) {
    std::optional<NameTable::Id> heap;
    if (!region.empty() && !(heap = pool.find_name(region))) return;
    for (const auto& x : pool.samples()) {
      if ((heap && x->heap != *heap) || (pid != 0 && x->pid != pid) || (uid && x->uid != *uid)) continue;
      f(pool, *x);
    }
  };
  for (const auto& [id, s] : sessions_) visit(s.pool);
  for (const auto& [name, kept] : kept_) {
    if (region.empty() || name == region) visit(kept);
  }
}

std::vector<SiteTotals> TelemetryStore::top_sites(size_t k, const LiveCheck& live) const {
  // What the sites need of each sample, taken under the lock; whether a
  // region's object is live is asked after (it takes the region's lock).
  struct Seen {
    uint32_t region, site;
    uint64_t address, requested, period;
    bool live;
  };
  Strings strings;
  std::vector<Seen> seen;
  {
    std::lock_guard<std::mutex> g(mu_);
    for_each_sample("", 0, std::nullopt, [&](const SamplePool& pool, const SamplePool::Sample& x) {
      seen.push_back({strings.index(pool.name(x.heap)), strings.index(site_of(pool, x)), x.address, x.requested,
                      x.period, x.live});
    });
  }
  std::map<std::pair<uint32_t, uint32_t>, SiteTotals> sites;
  for (const Seen& x : seen) {
    SiteTotals& t = sites[{x.region, x.site}];
    const std::string& region = strings[x.region];
    t.region = region;
    t.site = strings[x.site];
    double w = sample_weight(x.requested, x.period);
    t.allocated_bytes += w * static_cast<double>(x.requested);
    if (x.live && (region == kProcessHeapLabel || !live || live(region, x.address))) {
      t.inuse_bytes += w * static_cast<double>(x.requested);
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

ProfileInput TelemetryStore::profile_input(const std::string& region, pid_t pid, std::optional<uint32_t> uid,
                                           const LiveCheck& live) const {
  ProfileInput in;
  struct Check {
    size_t sample;
    std::string region;
    uint64_t offset;
  };
  std::vector<Check> to_check;  // live samples in regions
  {
    std::lock_guard<std::mutex> g(mu_);
    const SamplePool* names_of = nullptr;
    std::unordered_map<NameTable::Id, uint32_t> function_of;  // pool's name -> profile's
    for_each_sample(region, pid, uid, [&](const SamplePool& pool, const SamplePool::Sample& x) {
      if (&pool != names_of) {
        names_of = &pool;
        function_of.clear();
      }
      ProfileSample& p = in.samples.emplace_back();
      p.stack.reserve(x.stack.size());
      for (const SamplePool::Frame& f : x.stack) {
        auto [it, fresh] = function_of.try_emplace(f.function, 0);
        if (fresh) it->second = in.function(pool.name(f.function));
        p.stack.push_back({f.address, it->second, x.session});
      }
      p.requested_bytes = x.requested;
      p.live = x.live;
      in.sample_period_bytes = x.period;
      if (x.live && pool.name(x.heap) != kProcessHeapLabel) {
        to_check.push_back({in.samples.size() - 1, pool.name(x.heap), x.address});
      }
    });
  }
  if (live) {
    for (const Check& c : to_check) in.samples[c.sample].live = live(c.region, c.offset);
  }
  return in;
}

uint64_t TelemetryStore::reports_total() const {
  std::lock_guard<std::mutex> g(mu_);
  return reports_;
}

std::array<uint64_t, static_cast<size_t>(Rejected::kCount)> TelemetryStore::rejected() const {
  std::lock_guard<std::mutex> g(mu_);
  return rejected_;
}

uint64_t TelemetryStore::samples_total() const {
  std::lock_guard<std::mutex> g(mu_);
  return samples_;
}

uint64_t TelemetryStore::stored_bytes() const {
  std::lock_guard<std::mutex> g(mu_);
  uint64_t sum = 0;
  for (const auto& [id, s] : sessions_) sum += s.pool.bytes();
  for (const auto& [name, kept] : kept_) sum += kept.bytes();
  return sum;
}

uint64_t TelemetryStore::uid_stored_bytes(uint32_t uid) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = uids_.find(uid);
  return it == uids_.end() ? 0 : it->second.budget.bytes;
}

}  // namespace memd::daemon
