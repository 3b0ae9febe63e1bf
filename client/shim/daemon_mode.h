// The shim's daemon mode: with MEMD_REGION=name in the environment, the
// whole program's heap lives in the memd region `name` (created in shared
// memory if it does not exist), leased from the daemon at $MEMD_SOCKET.
//
// gRPC, which talks to the daemon, allocates too. Its allocations must not
// come from the region whose lease is being asked for (that would recurse,
// or wait on itself), so they come from the process-local heap:
//  - on a thread while it calls the daemon (the link's rpc guard), and
//  - on every thread created from such a context (gRPC's own threads, made
//    during the connection or a call): pthread_create is wrapped here.
// Everything else goes to the region. Frees go wherever the memory came
// from, by address.
//
// A forked child does not hold the parent's lease: its mapping of the region
// becomes private copy-on-write (fork's promise: the child's writes do not
// reach the parent), it allocates from its process heap and it leaves the
// region's objects it inherited alone. An exec'd program connects anew.
#pragma once

#include <atomic>
#include <cstddef>

#include "client/shim/daemon_link.h"

namespace memd::client::shim {

// The heap every allocation goes to instead of the process heap: the daemon
// region's (set once connected) or the debug method's (debug_mode.h);
// nullptr: the process heap.
extern std::atomic<const memd_daemon_heap*> redirect_heap;
// Set (for good) once any allocation may leave malloc's fast path: a heap
// redirect above, or call-chain pools (MEMD_CHAIN_POOLS). One flag, so the
// fast path tests one word whatever the modes.
extern std::atomic<bool> alloc_detour;
inline void set_redirect_heap(const memd_daemon_heap* h) {
  redirect_heap.store(h, std::memory_order_release);
  alloc_detour.store(true, std::memory_order_release);
}
extern __thread int tl_private __attribute__((tls_model("initial-exec")));
extern bool forked_child;

// The redirected heap for an allocation by the calling thread, or nullptr
// (none, or a thread that must use the process heap).
inline const memd_daemon_heap* region_heap_for_alloc() {
  const memd_daemon_heap* h = redirect_heap.load(std::memory_order_acquire);
  return h != nullptr && tl_private == 0 ? h : nullptr;
}

// Frees `p` if it is the redirected heap's: true if it was (and is handled).
bool free_if_region(void* p);

}  // namespace memd::client::shim
