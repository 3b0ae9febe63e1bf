// The call-chain pools of a process (region/chain_pools.h) as a telemetry
// report carries them: the classifier's totals and its decided chains,
// pools first, at most kMaxReportedChains (the daemon takes no more).
#pragma once

#include <cstddef>
#include <vector>

#include "region/chain_pools.h"

namespace memd::client::telemetry {

inline constexpr size_t kMaxReportedChains = 64;

struct ChainPoolView {
  bool on = false;  // pooling is on in the process: the rest is filled
  region::ChainPoolStats totals;
  std::vector<region::ChainRecord> chains;
};

// This library's own pools (memd::Region::set_chain_pools, memd::Heap).
ChainPoolView local_chain_pools();

}  // namespace memd::client::telemetry
