/* memd C API: the calls of memd::Heap with a memd_ prefix. Failures return
 * NULL or -1 with errno set; nothing here aborts on bad input unless
 * MEMD_ABORT_ON_ERROR=1.
 *
 * A memd_heap runs Vmalloc's best method (the Vam heap). A private heap
 * under another method (pool, last, debug, profile) is a private region:
 * memd_region_create_private(MEMD_DEBUG, max_bytes) in memd_region.h, or
 * vmopen(Vmdcheap, Vmdebug, 0) in vmalloc.h. */
#ifndef MEMD_MEMD_H_
#define MEMD_MEMD_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct memd_heap memd_heap;

typedef struct memd_heap_options {
  size_t reserve_bytes;  /* address space to reserve; 0: 4 GiB */
  unsigned max_threads;  /* threads using the heap at once; 0: 256 */
} memd_heap_options;

typedef struct memd_stat {
  size_t busy_objects, busy_bytes;   /* live objects and their usable bytes */
  size_t free_objects, free_bytes;   /* free space inside blocks */
  size_t pages_in_use, pages_dirty, pages_discarded, pages_committed;
} memd_stats;

enum { MEMD_RESIZE_MOVE = 1, MEMD_RESIZE_COPY = 2, MEMD_RESIZE_CLEAR = 4 };

/* NULL options: defaults. NULL and errno (EINVAL, ENOMEM) on failure. */
memd_heap* memd_heap_open(const memd_heap_options* options);
void memd_heap_close(memd_heap* heap);
/* The heap malloc uses under the shim. */
memd_heap* memd_process_heap(void);

void* memd_alloc(memd_heap* heap, size_t size);
void* memd_calloc(memd_heap* heap, size_t count, size_t size);          /* ENOMEM on overflow */
void* memd_alloc_aligned(memd_heap* heap, size_t align, size_t size);   /* EINVAL: align not a power of two */
void memd_free(memd_heap* heap, void* p);
/* n objects of `size` into out[0..n) at once, faster than n memd_alloc
 * calls. Returns how many it made: fewer than n only when memory runs out
 * (errno ENOMEM), 0 with errno EINVAL if out is NULL. */
size_t memd_alloc_batch(memd_heap* heap, size_t n, size_t size, void** out);
/* Allocation hints: an object of `size` within `near_bytes` of `hint`
 * (MEMD_NEAR_LINE, MEMD_NEAR_PAGE, MEMD_NEAR_BLOCK: anywhere in the hint's
 * block) when the hint's block has a free one there, else as memd_alloc.
 * Any hint is safe: a foreign or NULL one is the plain path. */
#define MEMD_NEAR_LINE ((size_t)64)
#define MEMD_NEAR_PAGE ((size_t)4096)
#define MEMD_NEAR_BLOCK ((size_t)-1)
void* memd_alloc_near(memd_heap* heap, size_t size, const void* hint, size_t near_bytes);
/* memd_free of each of p[0..n); NULL entries are skipped. */
void memd_free_batch(memd_heap* heap, void* const* p, size_t n);
/* Call-chain pools for memd_alloc on this heap (the DPA paper; see
 * docs/heap.md): on 1, the small objects of each busy call chain (the
 * caller of memd_alloc, lengthened past wrappers) come from blocks of their
 * own; on 0, off. The process's chain classifier starts with its defaults.
 * Set it before other threads use the heap. 0, or -1 with errno EINVAL. */
int memd_heap_set_chain_pools(memd_heap* heap, int on);
void* memd_resize(memd_heap* heap, void* p, size_t size, unsigned flags);
int memd_clear(memd_heap* heap);
int memd_compact(memd_heap* heap);
int memd_stat(memd_heap* heap, memd_stats* out);
/* The start of the live object holding p, or NULL. */
void* memd_addr(memd_heap* heap, const void* p);
/* Usable size of the live object starting at p; 0 (errno EINVAL) otherwise. */
size_t memd_size(memd_heap* heap, const void* p);
/* 0 if every invariant holds; else -1, errno EIO, and a message. */
int memd_check(memd_heap* heap, char* message, size_t message_size);

#ifdef __cplusplus
}
#endif

#endif /* MEMD_MEMD_H_ */
