// Builds the TelemetryReport a client sends on its session stream: the
// counters of each heap, the sample events drained since the last report,
// and the names of return addresses the daemon has not been sent yet on
// this session. Leading frames inside memd itself (the allocator's own
// functions) are cut, so a stack starts at the code that allocated.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/types/span.h"
#include "client/telemetry/chain_pool_view.h"
#include "client/telemetry/telemetry_abi.h"
#include "heap/heap_counters.h"
#include "memd/v1/memd.pb.h"

namespace memd::client::telemetry {

struct HeapView {
  std::string region;        // empty: the process heap
  uintptr_t base = 0;        // start of its data: events are matched by it
  uint64_t instance = 0;     // RegionLink::instance
  heap::CounterSnapshot counters;
};

struct ClientTotals {
  uint64_t rpcs = 0;
  uint64_t lease_calls = 0;
  uint64_t sample_period = 0;
  uint64_t samples_taken = 0;
  uint64_t samples_dropped = 0;
  uint64_t reports_dropped = 0;
};

class ReportBuilder {
 public:
  // A new session: the daemon knows no symbols yet.
  void new_session() { sent_symbols_.clear(); }

  // `chains`: the process's call-chain pools, nullptr if it has none on.
  v1::TelemetryReport build(const std::vector<HeapView>& heaps, absl::Span<const memd_sample_event> events,
                            const ClientTotals& totals, const ChainPoolView* chains = nullptr);

  // The function a return address lies in, demangled; empty if unknown.
  const std::string& symbol(uint64_t address);

 private:
  bool is_allocator_frame(uint64_t address);
  // Adds the name of `pc` to the report, once per session.
  void send_symbol(v1::TelemetryReport* r, uint64_t pc);
  void add_chain_pools(v1::TelemetryReport* r, const ChainPoolView& view);

  std::unordered_map<uint64_t, std::string> names_;
  std::unordered_map<uint64_t, bool> allocator_frame_;
  std::unordered_set<uint64_t> sent_symbols_;
};

}  // namespace memd::client::telemetry
