// TelemetryStore::report_chains: a client's call-chain pools. Everything in
// it comes from the client and ends up in /metrics: the counters pass the
// same checks as every other counter, and a chain names one of at most
// kMaxChainPools pools, once, with 1..kMaxChainFrames frames, or it is left
// out and counted (memd_telemetry_rejected_total{reason="chain"}); its
// frames are named by the session's symbols, which are already made safe
// for labels, and cut to kMaxChainFrameName bytes each.
#include <algorithm>
#include <cstdio>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include "daemon/client_text.h"
#include "daemon/telemetry_store.h"

namespace memd::daemon {
namespace {

bool valid_chain(const v1::Chain& c, uint32_t taken_pools) {
  if (c.stack_size() < 1 || c.stack_size() > TelemetryStore::kMaxChainFrames) return false;
  if (c.object_bytes() > TelemetryStore::kMaxChainObjectBytes || c.object_bytes() % 8 != 0) return false;
  switch (c.outcome()) {
    case v1::CHAIN_POOLED:
      return c.pool() >= 1 && c.pool() <= TelemetryStore::kMaxChainPools && !(taken_pools >> (c.pool() - 1) & 1);
    case v1::CHAIN_WRAPPER:
    case v1::CHAIN_MIXED_SIZES:
    case v1::CHAIN_PAST_POOLS:
      return c.pool() == 0;
    default:
      return false;
  }
}

std::string frame_name(const SamplePool& symbols, uint64_t pc) {
  if (const std::string* name = symbols.symbol(pc); name != nullptr && !name->empty()) {
    // Safe already: only cut, after a whole character or escape.
    return client_text(*name, TelemetryStore::kMaxChainFrameName);
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(pc));
  return buf;
}

}  // namespace

void TelemetryStore::report_chains(SessionData& s, const v1::TelemetryReport& r, uint64_t now_ms) {
  if (!r.has_chain_pools()) return;
  const v1::ChainPools& c = r.chain_pools();
  ChainPoolTotals& t = s.view.chains;
  const uint64_t reported[] = {c.chains_seen(), c.pooled(),  c.wrappers(), c.mixed_sizes(),
                               c.past_pools(),  c.unwinds(), c.untracked()};
  uint64_t* shown[] = {&t.seen, &t.pooled, &t.wrappers, &t.mixed_sizes, &t.past_pools, &t.unwinds, &t.untracked};
  static_assert(std::size(reported) == std::tuple_size_v<decltype(s.chain_counts)>);
  for (size_t i = 0; i < std::size(reported); ++i) take_scalar(s.chain_counts[i], reported[i], now_ms, shown[i]);
  s.view.chain_pools = true;

  if (static_cast<size_t>(c.chains_size()) > kMaxReportedChains) {
    reject(Rejected::kChain, static_cast<uint64_t>(c.chains_size()) - kMaxReportedChains);
  }
  std::vector<PooledChain> pools;
  uint32_t taken_pools = 0;  // bit p - 1: pool p has its chain
  for (int i = 0; i < c.chains_size() && static_cast<size_t>(i) < kMaxReportedChains; ++i) {
    const v1::Chain& chain = c.chains(i);
    if (!valid_chain(chain, taken_pools)) {
      reject(Rejected::kChain);
      continue;
    }
    if (chain.outcome() != v1::CHAIN_POOLED) continue;
    taken_pools |= uint32_t{1} << (chain.pool() - 1);
    PooledChain& p = pools.emplace_back();
    p.pool = chain.pool();
    p.object_bytes = chain.object_bytes();
    for (uint64_t pc : chain.stack()) {
      if (!p.chain.empty()) p.chain += " < ";
      p.chain += frame_name(s.pool, pc);
    }
  }
  std::sort(pools.begin(), pools.end(), [](const PooledChain& a, const PooledChain& b) { return a.pool < b.pool; });
  s.view.pools = std::move(pools);
}

}  // namespace memd::daemon
