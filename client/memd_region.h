/* memd C API for regions: the calls of memd::Region (region/region.h) with a
 * memd_region_ prefix. Failures return NULL or -1 with errno set:
 *   ENOENT no such region or root      EEXIST it exists already
 *   EACCES no permission               EINVAL bad name, size or argument
 *   EBUSY  it has an owner already     EPROTO another version, method or page size
 *   EBADMSG truncated or damaged       ECONNREFUSED no owner answers on the socket
 *   ENOMEM out of memory               EROFS  attached read-only
 *   ENOSPC every root slot is taken
 *   ETIMEDOUT (roots) the region's roots lock was held by another process
 *          longer than MEMD_ROOTS_LOCK_TIMEOUT_MS (default 10 s): a process
 *          stopped while it makes a root keeps it; reported on stderr */
#ifndef MEMD_MEMD_REGION_H_
#define MEMD_MEMD_REGION_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct memd_region memd_region;

enum memd_discipline { MEMD_SHM = 1, MEMD_FILE = 2, MEMD_PMEM = 3 };
/* How the region manages memory (Vmalloc's methods; docs/methods.md).
 * MEMD_METHOD_ANY opens a region with whatever method it was made with. */
enum memd_method {
  MEMD_METHOD_ANY = 0,
  MEMD_BEST = 1, /* any size, any order of frees */
  MEMD_POOL = 2, /* one size (the first allocation's), no per-object header */
  MEMD_LAST = 3, /* bump allocation: only the most recent object is freed;
                    memd_region_clear frees all */
  MEMD_DEBUG = 4,  /* best, with guards checked at free and resize; errors
                      reported on stderr naming the object and call sites */
  MEMD_PROFILE = 5 /* best, counting bytes and objects per call site */
};

/* Creates a region and opens it as its owner. max_bytes: its fixed size. */
memd_region* memd_region_create(const char* name, int discipline, size_t max_bytes);
memd_region* memd_region_create_method(const char* name, int discipline, int method, size_t max_bytes);
/* A region of this process only (shm whose name is removed at once: no
 * other process can open or attach it), for a private heap under any
 * method: memd_region_create_private(MEMD_DEBUG, 64 << 20) is a debug heap. */
memd_region* memd_region_create_private(int method, size_t max_bytes);
/* Opens an existing region as its owner, recovering it after a crash.
 * With a method other than the region's: NULL, EPROTO. */
memd_region* memd_region_open(const char* name, int discipline);
memd_region* memd_region_open_method(const char* name, int discipline, int method);
/* Attaches to a region whose owner serves leases on `socket_path`. */
memd_region* memd_region_attach(const char* name, int discipline, const char* socket_path,
                                int read_only);
/* Owner only: answers other processes on a Unix socket. */
int memd_region_serve(memd_region* region, const char* socket_path);
/* Closes this process's use of the region (a client's objects stay). */
void memd_region_close(memd_region* region);
int memd_region_remove(const char* name, int discipline);

/* The region's method (a memd_method). */
int memd_region_method(memd_region* region);
/* Pool and last: frees every object of the method at once (roots stay);
 * nothing else may use the method's objects meanwhile. -1, EPROTO for best. */
int memd_region_clear(memd_region* region);
/* Usable size of a live object (last: of the most recent one only), else 0. */
size_t memd_region_size(memd_region* region, const void* p);

/* The debug and profile methods (docs/methods.md). Calls through this API
 * are named by their caller's return address in reports and summaries. */
enum memd_debug_flags {
  MEMD_DEBUG_CHECK = 1, /* check every object of the region at every call */
  MEMD_DEBUG_ABORT = 2  /* abort at the first error */
};
/* This process's debug settings for the region (flags: memd_debug_flags).
 * -1, EINVAL for a region of another method. */
int memd_region_debug_flags(memd_region* region, int flags);
/* Debug: every call of this process meeting `address` reports it. -1:
 * EINVAL (another method), ENOSPC (16 watched already). */
int memd_region_watch(memd_region* region, const void* address);
/* Debug: reports each live object whose guards are overwritten (once per
 * object); how many are, or -1, EINVAL for another method. */
int memd_region_check_objects(memd_region* region);
/* Debug and profile: the per-site summary of every process's calls to fd.
 * -1, EPROTO for another method. */
int memd_region_write_profile(memd_region* region, int fd);

/* A pool region fails (EINVAL) any size but its fixed one. */
void* memd_region_alloc(memd_region* region, size_t size);
/* count * size zeroed bytes (fresh pages are not written again); ENOMEM on
 * overflow. */
void* memd_region_calloc(memd_region* region, size_t count, size_t size);
void memd_region_free(memd_region* region, void* p);
/* n objects of `size` into out[0..n) at once; returns how many (fewer only
 * when memory runs out or the method refuses the size: errno says). */
size_t memd_region_alloc_batch(memd_region* region, size_t n, size_t size, void** out);
/* An object within near_bytes of hint when the hint's block has a free one
 * there (best; the other methods ignore the hint), else as
 * memd_region_alloc. */
void* memd_region_alloc_near(memd_region* region, size_t size, const void* hint, size_t near_bytes);
/* memd_region_free of each of p[0..n); NULL entries are skipped. */
void memd_region_free_batch(memd_region* region, void* const* p, size_t n);
/* Call-chain pools for memd_region_alloc in this process (the DPA paper;
 * see docs/heap.md): on 1, the small objects of each busy call chain come
 * from blocks of their own; on 0, off. The chains are this process's; other
 * processes of the region choose for themselves. Set it before other
 * threads allocate in the region. 0; -1 with errno EINVAL (on not 0 or 1)
 * or ENOTSUP (a region of another method than best). */
int memd_region_set_chain_pools(memd_region* region, int on);
void* memd_region_resize(memd_region* region, void* p, size_t size);
uint64_t memd_region_offset(memd_region* region, const void* p);
void* memd_region_at(memd_region* region, uint64_t offset);

/* The named root `name`: found, or made as `size` zeroed bytes (then
 * *created = 1). Atomic across processes; waits for another process making
 * a root at most MEMD_ROOTS_LOCK_TIMEOUT_MS (then NULL, ETIMEDOUT). */
void* memd_region_root(memd_region* region, const char* name, size_t size, int* created);
/* The named root, or NULL (ENOENT). Takes no lock. */
void* memd_region_find(memd_region* region, const char* name);

int memd_region_persist(memd_region* region, const void* p, size_t n);
int memd_region_checkpoint(memd_region* region);

/* Failure-atomic publish (best method). memd_region_reserve allocates an
 * object that is freed if this process dies (or the power fails) before
 * memd_region_publish makes it durable and durably stores `value` into the
 * 8-byte word `link` of the region, as one step. NULL with errno ENOTSUP
 * (another method), EAGAIN (the region's log is full), or as for
 * memd_region_alloc. publish and cancel: 0, or -1 with errno EINVAL for an
 * object that is no reservation of this process or a link that is no word
 * of the region. */
void* memd_region_reserve(memd_region* region, size_t size);
int memd_region_publish(memd_region* region, void* object, uint64_t* link, uint64_t value);
int memd_region_cancel(memd_region* region, void* object);
/* Several reservations (at most 64) published as one step: after any crash
 * or power cut, either every link holds its value or none changed and every
 * object is freed. 0, or -1 with errno EINVAL (an item that is no
 * reservation of this process, a link that is no word of the region, a
 * repeated object or link, too many items): then nothing is published and
 * the reservations stay. */
typedef struct memd_publish_item {
  void* object;
  uint64_t* link;
  uint64_t value;
} memd_publish_item;
int memd_region_publish_batch(memd_region* region, const memd_publish_item* items, size_t n);
/* 0 if every invariant holds; else -1, errno EIO, and a message. */
int memd_region_check(memd_region* region, char* message, size_t message_size);

#ifdef __cplusplus
}
#endif

#endif /* MEMD_MEMD_REGION_H_ */
