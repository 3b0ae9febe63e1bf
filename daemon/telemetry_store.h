// What clients reported about their allocations (TelemetryReport on their
// session streams), kept for /metrics and heap profiles.
//
// Counters are cumulative in each report; the store keeps each session's
// latest it believes (client_counters.h says which), and folds them into
// per-region totals when the session ends (or stops reporting a region), so
// that totals never go down.
//
// Samples are kept per session in a SamplePool, in a budget of bytes
// (`telemetry-bytes-per-session`) and a count (kMaxSamplesPerSession, oldest
// freed ones go first); what does not fit is dropped and counted. When a
// session ends, its pool goes: its samples of the process heap with it (that
// memory died with the process); its live samples in regions move to their
// region's pool, as the objects outlive it (bounded per region, by the same
// budget and kMaxKeptSamplesPerRegion).
//
// The pools of one uid's live sessions also share a budget
// (`telemetry-bytes-per-uid`), so that a user's many sessions cannot each
// fill their own: past it samples and symbols are dropped and counted too.
// A session's bytes return to its uid when the session ends. Region pools
// are not charged to any uid: they are bounded per region already, and what
// they keep belongs to no live session.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/client_counters.h"
#include "daemon/heap_profile.h"
#include "daemon/sample_pool.h"
#include "memd/v1/memd.pb.h"

namespace memd::daemon {

// The label of the process-local heaps.
inline constexpr const char* kProcessHeapLabel = "(process)";

// A segregated class's object size ("16".."32768"), "large", "huge".
std::string size_class_label(uint32_t size_class);

struct ClientIdentity {
  uint64_t session = 0;
  pid_t pid = 0;
  uint32_t uid = 0;
  std::string program;
};

// A client's call-chain pools (TelemetryReport.chain_pools): its
// classifier's cumulative counts, and its pools now.
struct ChainPoolTotals {
  uint64_t seen = 0, pooled = 0, wrappers = 0, mixed_sizes = 0, past_pools = 0, unwinds = 0, untracked = 0;
};
struct PooledChain {
  uint32_t pool = 0;          // 1..kMaxChainPools, one chain each
  uint32_t object_bytes = 0;
  std::string chain;          // its frames' names (else addresses), innermost first, " < " between
};

struct ClientTelemetry {
  ClientIdentity who;
  std::map<std::string, ClassTotals> by_region;  // summed over classes
  uint64_t rpcs = 0, lease_calls = 0, samples_taken = 0, samples_dropped = 0, reports_dropped = 0;
  uint64_t reports = 0;
  bool chain_pools = false;  // the client reported pools on
  ChainPoolTotals chains;
  std::vector<PooledChain> pools;  // by pool number
};

struct SiteTotals {
  std::string region, site;
  double inuse_bytes = 0, inuse_objects = 0, allocated_bytes = 0;
};

// Why a part of a report was left out (memd_telemetry_rejected_total{reason}).
enum class Rejected {
  kUnknownRegion,     // a heap or sample of a region the session never had open
  kSizeClass,         // not a size class of the heap
  kSymbolCount,       // a symbol past kMaxSymbolsPerSession
  kSessionBytes,      // a sample or symbol past the session's budget of bytes
  kUidBytes,          // a sample or symbol past the budget of its uid's live sessions
  kRegionFull,        // a sample of an ended session its region's pool had no room for
  kCounterDecreased,  // a cumulative counter went back
  kCounterTooLarge,   // a counter above kMaxCounter
  kCounterJump,       // a counter grew faster than possible
  kChain,             // a call chain of chain_pools that is malformed, or past kMaxReportedChains
  kCount
};
const char* rejected_label(Rejected reason);

class TelemetryStore {
 public:
  static constexpr size_t kMaxSamplesPerSession = 16384;
  static constexpr size_t kMaxKeptSamplesPerRegion = 16384;
  static constexpr int kMaxFrames = 64;
  static constexpr size_t kMaxSymbolBytes = 512;
  static constexpr size_t kMaxSymbolsPerSession = 65536;
  static constexpr uint64_t kDefaultBytesPerSession = uint64_t{8} << 20;
  static constexpr uint64_t kDefaultBytesPerUid = uint64_t{64} << 20;
  // Call-chain pools: what a report may carry (the client's numbers, which
  // bound the labels a client can add to /metrics).
  static constexpr size_t kMaxReportedChains = 64;
  static constexpr uint32_t kMaxChainPools = 32;
  static constexpr int kMaxChainFrames = 4;
  static constexpr uint32_t kMaxChainObjectBytes = 256;
  static constexpr size_t kMaxChainFrameName = 160;  // bytes of each frame's name in a label

  // A client's report. Only heaps of `reportable` regions (those the
  // session has had open; and the process heap) count, and only real size
  // classes: a client cannot make up label values. What is left out is
  // counted (rejected()). `budget` (telemetry-bytes-per-session) bounds the
  // bytes of the session's samples and symbols, fixed at its first report;
  // `uid_budget` (telemetry-bytes-per-uid) those of all live sessions of
  // `who.uid`, fixed when the first of them is made.
  void report(const ClientIdentity& who, const std::set<std::string>& reportable, const v1::TelemetryReport& r,
              uint64_t budget = kDefaultBytesPerSession, uint64_t uid_budget = kDefaultBytesPerUid);
  // The session's live region samples move to their regions' pools, each
  // bounded by `budget` (fixed when a region's pool is made).
  void end_session(uint64_t session, uint64_t budget = kDefaultBytesPerSession);
  // A region was removed: everything about it goes.
  void forget_region(const std::string& region);

  std::map<std::pair<std::string, std::string>, ClassTotals> class_totals() const;  // (region, class)
  std::vector<ClientTelemetry> clients() const;
  // The top `k` sites per region by estimated live bytes. `live` (if given)
  // says whether a sampled object in a region is still allocated (objects
  // freed by another process than the one that sampled them).
  using LiveCheck = std::function<bool(const std::string& region, uint64_t offset)>;
  std::vector<SiteTotals> top_sites(size_t k, const LiveCheck& live) const;
  // Samples of one region (kProcessHeapLabel: process heaps), of one client
  // (pid 0: all), taken by processes of `uid` (nullopt: of every user).
  ProfileInput profile_input(const std::string& region, pid_t pid, std::optional<uint32_t> uid,
                             const LiveCheck& live) const;

  uint64_t reports_total() const;
  std::array<uint64_t, static_cast<size_t>(Rejected::kCount)> rejected() const;
  uint64_t samples_total() const;
  // Bytes the samples and symbols of every pool take now.
  uint64_t stored_bytes() const;
  // Of those, the bytes of the live sessions of `uid`.
  uint64_t uid_stored_bytes(uint32_t uid) const;

 private:
  struct Counted {
    ClassTotals totals;
    uint64_t at_ms = 0;  // when the daemon took them (steady clock)
  };
  struct Heap {
    uint64_t instance = 0;
    std::map<uint32_t, Counted> classes;
  };
  struct Scalar {  // one of the client's own counters of ClientTelemetry
    std::optional<uint64_t> value;
    uint64_t at_ms = 0;
  };
  // The budget the live sessions of one uid share.
  struct UidAccount {
    SharedBudget budget;
    size_t sessions = 0;  // live ones drawing on it; the account goes with the last
  };
  struct SessionData {
    SessionData(uint32_t uid, uint64_t bytes, SharedBudget* uid_budget)
        : uid(uid), pool(bytes, kMaxSamplesPerSession, uid_budget) {}
    const uint32_t uid;  // whose account the pool draws on
    ClientTelemetry view;
    std::map<std::string, Heap> latest;  // by heap label
    std::map<std::string, uint64_t> reported_ms;  // heaps ever reported: when last
    Scalar rpcs, lease_calls, samples_taken, samples_dropped, reports_dropped;
    std::array<Scalar, 7> chain_counts;  // ChainPoolTotals, in its order
    SamplePool pool;
  };

  void report_counters(SessionData& s, const std::set<std::string>& reportable, const v1::TelemetryReport& r,
                       uint64_t now_ms);
  void report_scalars(SessionData& s, const v1::TelemetryReport& r, uint64_t now_ms);
  void report_samples(SessionData& s, const std::set<std::string>& reportable, const v1::TelemetryReport& r);
  // telemetry_chains.cc; after report_samples (a report's chains are named
  // by its symbols).
  void report_chains(SessionData& s, const v1::TelemetryReport& r, uint64_t now_ms);
  void take_scalar(Scalar& kept, uint64_t now, uint64_t now_ms, uint64_t* shown);
  void retire(const std::string& region, const Heap& heap);  // its counters into totals
  void reject(Rejected reason, uint64_t n = 1) { rejected_[static_cast<size_t>(reason)] += n; }
  void reject(CounterVerdict v);
  void reject(SamplePool::Stored s);  // a symbol or sample not stored
  template <class F>  // f(pool, sample) for each sample of `region` ("": all), pid (0: all), uid
  void for_each_sample(const std::string& region, pid_t pid, std::optional<uint32_t> uid, F f) const;

  mutable std::mutex mu_;
  std::map<uint32_t, UidAccount> uids_;  // of live sessions; before sessions_, whose pools point into it
  std::map<uint64_t, SessionData> sessions_;
  std::map<std::string, std::map<uint32_t, ClassTotals>> retired_;  // region -> class -> totals
  std::map<std::string, SamplePool> kept_;  // region samples of ended sessions
  // Sessions that sampled in each region: where the free of an object
  // another session sampled is looked for (not in every session).
  std::map<std::string, std::set<uint64_t>> samplers_;
  uint64_t reports_ = 0;
  uint64_t samples_ = 0;
  std::array<uint64_t, static_cast<size_t>(Rejected::kCount)> rejected_{};
};

}  // namespace memd::daemon
