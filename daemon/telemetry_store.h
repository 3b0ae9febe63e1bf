// What clients reported about their allocations (TelemetryReport on their
// session streams), kept for /metrics and heap profiles.
//
// Counters are cumulative in each report; the store keeps each session's
// latest, and folds them into per-region totals when the session ends (or
// stops reporting a region), so that totals never go down.
//
// Samples are kept per session, bounded (kMaxSamplesPerSession, oldest freed
// ones go first). When a session ends, its samples of the process heap go
// (that memory died with the process); those in regions stay, as the
// objects do (bounded per region).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "daemon/heap_profile.h"
#include "memd/v1/memd.pb.h"

namespace memd::daemon {

// The label of the process-local heaps.
inline constexpr const char* kProcessHeapLabel = "(process)";

struct ClassTotals {
  uint64_t allocations = 0, frees = 0, allocated_bytes = 0, freed_bytes = 0;
  void add(const ClassTotals& o) {
    allocations += o.allocations;
    frees += o.frees;
    allocated_bytes += o.allocated_bytes;
    freed_bytes += o.freed_bytes;
  }
};

// "16".."496", "large", "huge".
std::string size_class_label(uint32_t size_class);

struct ClientIdentity {
  uint64_t session = 0;
  pid_t pid = 0;
  uint32_t uid = 0;
  std::string program;
};

struct ClientTelemetry {
  ClientIdentity who;
  std::map<std::string, ClassTotals> by_region;  // summed over classes
  uint64_t rpcs = 0, lease_calls = 0, samples_taken = 0, samples_dropped = 0, reports_dropped = 0;
  uint64_t reports = 0;
};

struct SiteTotals {
  std::string region, site;
  double inuse_bytes = 0, inuse_objects = 0, allocated_bytes = 0;
};

class TelemetryStore {
 public:
  static constexpr size_t kMaxSamplesPerSession = 16384;
  static constexpr size_t kMaxKeptSamplesPerRegion = 16384;
  static constexpr int kMaxFrames = 64;
  static constexpr size_t kMaxSymbolBytes = 512;
  static constexpr size_t kMaxSymbolsPerSession = 65536;

  // A client's report. Only heaps of `reportable` regions (those the
  // session has had open; and the process heap) count, and only real size
  // classes: a client cannot make up label values. What is left out is
  // counted (rejected_total).
  void report(const ClientIdentity& who, const std::set<std::string>& reportable, const v1::TelemetryReport& r);
  void end_session(uint64_t session);
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
  // (pid 0: all).
  ProfileInput profile_input(const std::string& region, pid_t pid, const LiveCheck& live) const;

  uint64_t reports_total() const;
  uint64_t rejected_total() const;
  uint64_t samples_total() const;

 private:
  struct StoredSample {
    std::string region;  // kProcessHeapLabel for process heaps
    uint64_t address = 0;
    uint64_t requested = 0;
    uint64_t period = 0;
    pid_t pid = 0;
    uint64_t session = 0;
    // The only field that changes after a sample is stored; readers look
    // at samples after letting go of the store's lock.
    std::atomic<bool> live{true};
    std::vector<ProfileFrame> stack;
  };
  struct SessionData {
    ClientTelemetry view;
    std::map<std::string, std::map<uint32_t, ClassTotals>> latest;  // region -> class -> totals
    std::map<std::string, uint64_t> instances;  // region -> the opening `latest` counts
    std::unordered_map<uint64_t, std::string> symbols;
    std::deque<std::shared_ptr<StoredSample>> samples;
    // Live samples by (region, address), to match their frees.
    std::map<std::pair<std::string, uint64_t>, std::shared_ptr<StoredSample>> live;
  };

  void retire(SessionData& s, const std::string& region);  // its latest counters into totals
  void add_sample(SessionData& s, const v1::Sample& in, uint64_t period);
  std::vector<std::shared_ptr<StoredSample>> samples_locked(const std::string& region, pid_t pid) const;

  mutable std::mutex mu_;
  std::map<uint64_t, SessionData> sessions_;
  std::map<std::string, std::map<uint32_t, ClassTotals>> retired_;  // region -> class -> totals
  std::map<std::string, std::deque<std::shared_ptr<StoredSample>>> kept_;  // region samples of ended sessions
  uint64_t reports_ = 0;
  uint64_t samples_ = 0;
  uint64_t rejected_ = 0;
};

}  // namespace memd::daemon
