#include "client/telemetry/chain_pool_view.h"

namespace memd::client::telemetry {

ChainPoolView local_chain_pools() {
  ChainPoolView v;
  v.on = region::chain_pools_enabled();
  if (!v.on) return v;
  v.totals = region::chain_pool_stats();
  v.chains.resize(kMaxReportedChains);
  v.chains.resize(region::chain_pools_list(v.chains.data(), v.chains.size()));
  return v;
}

}  // namespace memd::client::telemetry
