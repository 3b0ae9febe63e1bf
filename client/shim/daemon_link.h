/* The boundary between the malloc shim (libmemd-malloc.so) and its daemon
 * link (libmemd-daemon-link.so), which the shim loads with dlopen only when
 * MEMD_REGION asks for a daemon region, so that programs that do not ask
 * never load gRPC. A plain C interface: the two libraries share no C++
 * state (each carries its own copy of the heap code). */
#ifndef MEMD_CLIENT_SHIM_DAEMON_LINK_H_
#define MEMD_CLIENT_SHIM_DAEMON_LINK_H_

#include <stddef.h>
#include <stdint.h>

#include "client/telemetry/telemetry_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The shim's side: the link brackets every call it makes to the daemon, so
 * that memory gRPC allocates meanwhile (on this thread, or on threads
 * created meanwhile) comes from the process-local heap, never from the
 * region whose lease is being asked for. */
struct memd_daemon_link_hooks {
  void (*enter_private)(void);
  void (*leave_private)(void);
  /* The shim's process-heap telemetry, reported by the link; NULL: none. */
  const struct memd_shim_telemetry* telemetry;
  /* The method to ask the region for (memd_region.h's numbers; 0: the
   * region's own), and the debug method's settings in this process. */
  int method;
  int debug_check, debug_abort;
  const uintptr_t* watch;
  int watches;
};

/* The shim's side of telemetry: its process heap's counters and sampled
 * allocations (its own copy of the sampler). */
struct memd_shim_telemetry {
  size_t (*drain)(struct memd_sample_event* out, size_t max);
  /* Adds the process heap's counters to a memd::heap::CounterSnapshot. */
  void (*process_heap_counters)(void* snapshot);
  void (*sampler_counts)(uint64_t* taken, uint64_t* dropped);
  /* The shim's call-chain pools (MEMD_CHAIN_POOLS): 0 if they are off;
   * else 1, with a memd::region::ChainPoolStats in `stats` and up to `max`
   * memd::region::ChainRecords in `records`, their number in `count`. */
  int (*chain_pools)(void* stats, void* records, size_t max, size_t* count);
};

/* The link's side: the region heap. free returns 0 if p was not the
 * region's (nothing done). */
struct memd_daemon_heap {
  void* (*alloc)(size_t size);
  void* (*alloc_aligned)(size_t size, size_t align);
  void* (*alloc_zeroed)(size_t size);
  void* (*resize)(void* p, size_t size);
  int (*free)(void* p);
  size_t (*usable_size)(const void* p);
  int (*contains)(const void* p);
  void (*trim)(void);
  /* In a forked child: makes the region's mapping private copy-on-write, as
   * fork makes the rest of memory. 0 on success. No allocation. */
  int (*fork_child)(void);
  /* A region of the debug or profile method (else all three NULL): the
   * site the calling thread's next call is made for, the check of every
   * object, and the profile summary. */
  void (*set_site)(const char* file, unsigned line, const void* pc);
  int (*check_objects)(void);
  void (*write_profile)(int fd);
};

/* Connects to memd ($MEMD_SOCKET or the default socket) and opens (creating
 * it if needed) the region named `region`. 0 on success; else -1 and a
 * message in `error`. */
typedef int (*memd_daemon_link_open_fn)(const char* region, const struct memd_daemon_link_hooks* hooks,
                                        struct memd_daemon_heap* heap, char* error, size_t error_size);
int memd_daemon_link_open(const char* region, const struct memd_daemon_link_hooks* hooks,
                          struct memd_daemon_heap* heap, char* error, size_t error_size);

/* Connects to memd only to report the shim's telemetry (MEMD_TELEMETRY=1
 * without MEMD_REGION). 0 on success; else -1 and a message in `error`. */
typedef int (*memd_daemon_link_report_fn)(const struct memd_daemon_link_hooks* hooks, char* error,
                                          size_t error_size);
int memd_daemon_link_report(const struct memd_daemon_link_hooks* hooks, char* error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif
