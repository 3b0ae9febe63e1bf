// The shim's call-chain pools (region/chain_pools.h): MEMD_CHAIN_POOLS=1
// turns them on for the whole program, before main; the small objects of
// each busy call chain then come from blocks of their own.
// MEMD_CHAIN_POOLS_REPORT=1 writes the chains and their pools to stderr at
// exit. Tunables: MEMD_CHAIN_POOL_MIN_OBJECTS, MEMD_CHAIN_POOL_MAX_SIZE,
// MEMD_CHAIN_POOL_DEPTH.
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "region/chain_pools.h"
#include "client/shim/daemon_mode.h"

namespace memd::client::shim {
namespace {

using region::chain_pool_options_from_env;
using region::chain_pools_enable;
using region::chain_pools_enabled;
using region::chain_pools_report;

bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

__attribute__((constructor)) void start_chain_pools() {
  if (!env_on("MEMD_CHAIN_POOLS")) return;
  chain_pools_enable(chain_pool_options_from_env());
  alloc_detour.store(true, std::memory_order_release);
}

__attribute__((destructor)) void chain_pools_at_exit() {
  if (chain_pools_enabled() && env_on("MEMD_CHAIN_POOLS_REPORT")) chain_pools_report(STDERR_FILENO);
}

}  // namespace
}  // namespace memd::client::shim
