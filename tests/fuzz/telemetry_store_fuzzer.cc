// Fuzz target: the daemon's telemetry store, fed what clients report.
//
// Each session streams TelemetryReports that the daemon parses and keeps
// (daemon/telemetry_store.h). The input is a sequence of steps: a report
// (any bytes, parsed as a TelemetryReport) from one of four sessions of two
// users, the end of a session, or the removal of a region. Besides not
// crashing, the store must keep its promises whatever it is sent:
//   - the bytes it keeps stay within the budgets (per live session, per user
//     over its live sessions, and per region for samples of ended sessions);
//   - per-region totals never go down (until the region is removed);
//   - a client shows at most 32 call-chain pools, each once, with a
//     bounded label;
//   - the views built from it (/metrics, ListClients, profiles) build.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "daemon/heap_profile.h"
#include "daemon/telemetry_store.h"
#include "fuzz_input.h"
#include "memd/v1/memd.pb.h"

namespace {

using memd::daemon::ClassTotals;
using memd::daemon::TelemetryStore;
using memd::fuzz::FuzzInput;
using memd::fuzz::fail;

constexpr uint64_t kBudget = 64 << 10;     // per session
constexpr uint64_t kUidBudget = 96 << 10;  // per user: less than its two sessions' budgets
constexpr int kSessions = 4;               // two per user
const std::set<std::string> kReportable = {"", "orders", "cache"};
constexpr int kRegionsKept = 2;  // regions whose pools keep ended sessions' samples

struct State {
  TelemetryStore store;
  std::map<uint64_t, uint32_t> live;  // sessions that reported and have not ended -> uid
  uint64_t next_session = 1;
  uint64_t ids[kSessions] = {};
  std::map<std::pair<std::string, std::string>, ClassTotals> last_totals;
};
State* state = nullptr;

bool went_down(const ClassTotals& before, const ClassTotals& now) {
  return now.allocations < before.allocations || now.frees < before.frees ||
         now.allocated_bytes < before.allocated_bytes || now.freed_bytes < before.freed_bytes;
}

void check_promises() {
  TelemetryStore& store = state->store;
  std::map<uint32_t, uint64_t> per_uid;
  for (const auto& [session, uid] : state->live) per_uid[uid] += kBudget;
  uint64_t bound = kBudget * kRegionsKept;
  for (const auto& [uid, sessions_budget] : per_uid) {
    bound += std::min(sessions_budget, kUidBudget);
    if (store.uid_stored_bytes(uid) > kUidBudget) {
      fail("uid " + std::to_string(uid) + " keeps " + std::to_string(store.uid_stored_bytes(uid)) +
           " bytes, over its budget");
    }
  }
  if (store.stored_bytes() > bound) {
    fail("the store keeps " + std::to_string(store.stored_bytes()) + " bytes, over its budgets' " +
         std::to_string(bound));
  }
  auto totals = store.class_totals();
  for (const auto& [key, before] : state->last_totals) {
    auto now = totals.find(key);
    if (now == totals.end() || went_down(before, now->second)) {
      fail("totals of region '" + key.first + "' class " + key.second + " went down");
    }
  }
  state->last_totals = std::move(totals);
  // A client's pools: at most kMaxChainPools, each number once, each
  // chain's label bounded (these become /metrics series and labels).
  for (const memd::daemon::ClientTelemetry& c : store.clients()) {
    if (c.pools.size() > TelemetryStore::kMaxChainPools) fail("a client shows more pools than it can have");
    uint64_t numbers = 0;
    for (const memd::daemon::PooledChain& p : c.pools) {
      if (p.pool < 1 || p.pool > TelemetryStore::kMaxChainPools || (numbers >> p.pool & 1)) {
        fail("pool number " + std::to_string(p.pool) + " out of range or shown twice");
      }
      numbers |= uint64_t{1} << p.pool;
      if (p.chain.size() > TelemetryStore::kMaxChainFrames * (TelemetryStore::kMaxChainFrameName + 3)) {
        fail("a chain label of " + std::to_string(p.chain.size()) + " bytes");
      }
    }
  }
  auto live = [](const std::string&, uint64_t offset) { return offset % 3 != 0; };
  (void)store.top_sites(5, live);
  for (const std::string& region : {std::string(memd::daemon::kProcessHeapLabel), std::string("orders")}) {
    memd::daemon::ProfileInput input = store.profile_input(region, 0, std::nullopt, live);
    absl::StatusOr<std::string> profile = memd::daemon::build_heap_profile(input);
    if (!profile.ok()) fail("a profile of what the store keeps does not build: " + profile.status().ToString());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  state = new State();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  while (!in.empty()) {
    uint8_t step = in.take<uint8_t>();
    int who = step % kSessions;
    uint64_t& id = state->ids[who];
    switch ((step / kSessions) % 8) {
      case 0:  // the session ends; its next report starts a new one
        if (id != 0) {
          state->store.end_session(id, kBudget);
          state->live.erase(id);
          id = 0;
        }
        break;
      case 1: {  // a region is removed: its totals may go
        std::string region = in.take<uint8_t>() & 1 ? "orders" : "cache";
        state->store.forget_region(region);
        for (auto it = state->last_totals.begin(); it != state->last_totals.end();) {
          it = it->first.first == region ? state->last_totals.erase(it) : std::next(it);
        }
        break;
      }
      default: {
        uint16_t length = in.take<uint16_t>();
        memd::v1::TelemetryReport report;
        if (!report.ParseFromString(in.bytes(length))) break;  // the daemon's stream would end here
        if (id == 0) id = state->next_session++;
        uint32_t uid = 1000 + who % 2;
        memd::daemon::ClientIdentity identity{id, 100 + who, uid, "fuzz"};
        state->store.report(identity, kReportable, report, kBudget, kUidBudget);
        state->live[id] = uid;
        break;
      }
    }
  }
  check_promises();
  return 0;
}
