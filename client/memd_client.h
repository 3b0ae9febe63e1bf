/* memd C API for the daemon: a process's connection to memd (memd::Client,
 * client/daemon_client.h) and the regions it opens through it. A region
 * opened here is a memd_region like any other (memd_region.h): allocate,
 * free, roots, close, in shared memory, with blocks leased from the daemon.
 *
 *   memd_client* c = memd_connect(NULL);          // $MEMD_SOCKET or the default
 *   memd_open_options o;
 *   memd_open_options_init(&o);
 *   o.discipline = MEMD_FILE;                     // persists across restarts
 *   memd_region* r = memd_open(c, "jobs", &o);
 *   int created;
 *   long* count = memd_region_root(r, "count", sizeof(long), &created);
 *   ...
 *   memd_region_close(r);
 *   memd_disconnect(c);
 *
 * Failures return NULL or -1 with errno set, as in memd_region.h, and:
 *   ECONNREFUSED no daemon answers on the socket
 *   EACCES       the daemon refused this user (or the region's mode does)
 *   ENOMEM       a limit of the daemon (sessions, regions per user) is
 *                reached, or memory ran out
 *   ETIMEDOUT    the daemon did not answer in time */
#ifndef MEMD_MEMD_CLIENT_H_
#define MEMD_MEMD_CLIENT_H_

#include <stddef.h>
#include <stdint.h>

#include "memd_region.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct memd_client memd_client;

/* How memd_open finds or makes a region. Fill it with
 * memd_open_options_init, then set what differs: later versions of the
 * library may add fields in `reserved`, which init zeroes. */
typedef struct memd_open_options {
  int discipline;      /* MEMD_SHM (the default), MEMD_FILE or MEMD_PMEM */
  int any_discipline;  /* accept whatever an existing region is; a new one gets `discipline` */
  int method;          /* a memd_method; MEMD_METHOD_ANY: as created (creating: best) */
  int create;          /* create it if it does not exist (default 1) */
  int exclusive;       /* with create: fail (EEXIST) if it exists */
  int read_only;       /* map it read-only and lease nothing */
  unsigned mode;       /* creating: permission bits (0: 0600) */
  size_t max_bytes;    /* creating: its fixed size (0: the daemon's default) */
  uint32_t max_clients; /* creating: processes attached at once (0: default) */
  uint32_t max_threads; /* creating: thread heaps of all processes (0: default) */
  uint64_t reserved[4]; /* zero (init does it); anything else is EINVAL */
} memd_open_options;

void memd_open_options_init(memd_open_options* options);

/* Connects to the daemon on `socket_path` (NULL: $MEMD_SOCKET, else the
 * user's daemon, else the system's). One connection serves every region
 * of the process; it must outlive them. Not usable in a child made by
 * fork(): a child connects anew. */
memd_client* memd_connect(const char* socket_path);
/* REQUIRES: every region opened through it is closed. */
void memd_disconnect(memd_client* client);

/* Opens (or creates) the region `name` through the daemon. options NULL:
 * the defaults of memd_open_options_init. */
memd_region* memd_open(memd_client* client, const char* name, const memd_open_options* options);

/* The library's version, "MAJOR.MINOR.PATCH" (the soname carries MAJOR). */
const char* memd_version(void);

#ifdef __cplusplus
}
#endif

#endif /* MEMD_MEMD_CLIENT_H_ */
