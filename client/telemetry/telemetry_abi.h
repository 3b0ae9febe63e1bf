/* Sampled-allocation events as plain C structs: the malloc shim records
 * them in its copy of the sampler, and its daemon link (another library,
 * with its own copy of the code) drains them through a C function pointer
 * to report them. */
#ifndef MEMD_CLIENT_TELEMETRY_TELEMETRY_ABI_H_
#define MEMD_CLIENT_TELEMETRY_TELEMETRY_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MEMD_TELEMETRY_MAX_FRAMES 32

enum { MEMD_SAMPLE_ALLOC = 0, MEMD_SAMPLE_FREE = 1 };

struct memd_sample_event {
  uint8_t kind;           /* MEMD_SAMPLE_ALLOC or MEMD_SAMPLE_FREE */
  uint8_t frame_count;
  uint64_t id;            /* an allocation's sample id in this process; 0 in a free */
  uintptr_t heap_base;    /* start of the data of the heap's region */
  uintptr_t address;      /* the object */
  uint64_t requested_bytes;
  uint64_t allocated_bytes; /* as counted; 0 in a free */
  uint64_t time_ms;       /* unix ms of an allocation; 0 in a free */
  uintptr_t frames[MEMD_TELEMETRY_MAX_FRAMES]; /* return addresses, innermost first */
};

#ifdef __cplusplus
}
#endif

#endif
