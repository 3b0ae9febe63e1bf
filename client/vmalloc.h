/* The Vmalloc API (Vo, "Vmalloc: A General and Efficient Memory Allocator")
 * over memd: a region is a discipline (where its memory comes from) and a
 * method (how it is managed). A program written for Vmalloc builds against
 * this header and libmemd; docs/vmalloc.md says what differs from the
 * original library and why.
 *
 *   Vmalloc_t* vm = vmopen(Vmdcheap, Vmlast, 0);
 *   for (...) { b = vmalloc(vm, n); b = vmresize(vm, b, m, VM_RSMOVE); ...; vmclear(vm); }
 *   vmclose(vm);
 *
 * Disciplines: Vmdcheap and Vmdcsbrk give a region private memory of its
 * own; vmdcshm, vmdcfile and vmdcpmem name a memd region (shared, or
 * persistent) that every process opening the name shares. Methods: Vmbest,
 * Vmpool, Vmlast on every discipline; Vmdebug and Vmprofile on private
 * memory. Failures return NULL or -1 with errno set. Every call is safe from
 * any thread. Compile with -DVMFL to record the file and line of each call
 * (for Vmdebug's reports, Vmprofile's summary and VM_TRACE lines). */
#ifndef MEMD_VMALLOC_H_
#define MEMD_VMALLOC_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _vmalloc_s Vmalloc_t;
typedef struct _vmdisc_s Vmdisc_t;
typedef struct _vmethod_s Vmethod_t;
typedef struct _vmstat_s Vmstat_t;

typedef void* (*Vmemory_f)(Vmalloc_t* vm, void* addr, size_t csize, size_t nsize, Vmdisc_t* disc);
typedef int (*Vmexcept_f)(Vmalloc_t* vm, int type, void* obj, Vmdisc_t* disc);

/* A discipline. Start from one of memd's (copy *Vmdcheap, or fill one with
 * vmdcshm, vmdcfile or vmdcpmem) and set exceptf to hear of events; memd
 * gets memory itself, so a memoryf of the program's own is refused (EINVAL). */
struct _vmdisc_s {
  Vmemory_f memoryf;  /* memd's own (vmdcmemory): it is never called */
  Vmexcept_f exceptf; /* VM_OPEN, VM_CLOSE, VM_NOMEM, VM_BADADDR, VM_DISC; may be NULL */
  size_t round;       /* ignored: memd's pages are 4 KiB */
  /* memd's fields */
  int kind;           /* VM_DCPRIVATE, VM_DCSHM, VM_DCFILE, VM_DCPMEM */
  const char* name;   /* shm name or file path of a named region (kept, not copied) */
  size_t max_bytes;   /* the region's fixed size when vmopen creates it; 0: 1 GiB */
};

enum { VM_DCPRIVATE = 0, VM_DCSHM = 1, VM_DCFILE = 2, VM_DCPMEM = 3 };

struct _vmethod_s {
  int id;           /* VM_MTBEST ... */
  const char* name; /* "best", "pool", "last", "debug", "profile" */
};
enum { VM_MTBEST = 1, VM_MTPOOL = 2, VM_MTLAST = 3, VM_MTDEBUG = 4, VM_MTPROFILE = 5 };

/* vmstat: busy and free blocks and bytes; the region's extent. */
struct _vmstat_s {
  int n_busy;      /* live blocks */
  int n_free;      /* free slots in the heap's blocks (best); free objects a pool holds */
  size_t s_busy;   /* their bytes */
  size_t s_free;
  size_t m_busy;   /* largest live block: 0, memd does not keep it */
  size_t m_free;   /* largest free block: 0, likewise */
  int n_seg;       /* segments: 1, a region is one mapping */
  size_t extent;   /* bytes of memory the region holds */
  int mode;        /* the region's flags and method id (VM_MTxxx << 8) */
};

/* vmopen flags */
#define VM_TRUST 0x0001   /* accepted; changes nothing: a free is checked once, by the region, and a bad one never obeyed */
#define VM_TRACE 0x0002   /* every call is a line to the descriptor vmtrace() set (docs/trace.md) */
#define VM_DBCHECK 0x0004 /* Vmdebug: check every live block at every call */
#define VM_DBABORT 0x0008 /* Vmdebug: abort at the first error */
/* memd's: Vmbest only (else EINVAL): the small blocks of each busy call
 * chain come from pages of their own (call-chain pools, the DPA paper;
 * docs/heap.md). The chains are this process's. */
#define VM_CHAINPOOL 0x0010

/* vmresize types */
#define VM_RSMOVE 0x0001  /* the block may move */
#define VM_RSCOPY 0x0002  /* a moved block keeps its contents (memd always copies) */
#define VM_RSCLEAR 0x0004 /* bytes past the old size read zero */

/* exceptf events */
#define VM_OPEN 0    /* obj: the region's memory */
#define VM_CLOSE 1   /* obj: the region's memory */
#define VM_NOMEM 2   /* obj: NULL */
#define VM_BADADDR 3 /* obj: the address given to vmfree or vmresize */
#define VM_DISC 4    /* obj: the discipline vmdisc would change to; a negative return refuses */

extern Vmdisc_t* Vmdcheap; /* private memory (a heap region of its own, not Vmheap's blocks) */
extern Vmdisc_t* Vmdcsbrk; /* private memory (mapped, not sbrk) */
extern Vmethod_t* Vmbest;
extern Vmethod_t* Vmpool;
extern Vmethod_t* Vmlast;
extern Vmethod_t* Vmdebug;
extern Vmethod_t* Vmprofile;
/* The heap malloc uses: vmalloc(Vmheap, n) is malloc(n). Never closed. */
extern Vmalloc_t* Vmheap;
/* The region malloc, calloc, realloc and free use (Vmheap at first): under
 * libmemd-malloc.so, a program that sets it to an open region has malloc
 * allocate there, and free, realloc and malloc_usable_size of that
 * region's blocks go to it whatever Vmregion says later. Set it back to
 * Vmheap before closing the region. Without the shim (or with MEMD_REGION
 * or the shim's debug method, which redirect malloc themselves) malloc is
 * not memd's to redirect: vmregionmalloc() says whether it is followed. */
extern Vmalloc_t* Vmregion;
/* memd's: 1 if malloc follows Vmregion in this process, else 0. */
int vmregionmalloc(void);

/* memd's named disciplines: fill *disc (exceptf NULL) and return it. */
Vmdisc_t* vmdcshm(Vmdisc_t* disc, const char* name, size_t max_bytes);
Vmdisc_t* vmdcfile(Vmdisc_t* disc, const char* path, size_t max_bytes);
Vmdisc_t* vmdcpmem(Vmdisc_t* disc, const char* path, size_t max_bytes);
/* The memoryf of memd's disciplines (never called: returns NULL). */
void* vmdcmemory(Vmalloc_t* vm, void* addr, size_t csize, size_t nsize, Vmdisc_t* disc);

/* A new region. A named discipline opens the region if it exists (with the
 * method it was made with, else NULL and EPROTO) and creates it if not.
 * NULL and errno: EINVAL (a discipline or method memd lacks, Vmdebug or
 * Vmprofile on a named region), EPROTO, ENOMEM, EACCES, EBUSY. */
Vmalloc_t* vmopen(Vmdisc_t* disc, Vmethod_t* meth, int flags);
/* The region's discipline (disc NULL), or changes it to disc and returns
 * the one before. A region's tables live in its memory, so disc must give
 * the same memory: a copy of a private discipline for a private region,
 * the same kind and name for a named one (else NULL, EINVAL); what changes
 * is exceptf. The old discipline's exceptf hears VM_DISC first and may
 * refuse (NULL, ECANCELED). disc is kept, not copied. */
Vmdisc_t* vmdisc(Vmalloc_t* vm, Vmdisc_t* disc);
/* Closes it: a private region's memory is gone; a named one's stays. */
int vmclose(Vmalloc_t* vm);

void* vmalloc(Vmalloc_t* vm, size_t size);
void* vmalign(Vmalloc_t* vm, size_t size, size_t align); /* align: a power of two */
/* memd's: an allocation hint (the TP/Medius slides). Vmbest: a block
 * within near_bytes (0: 4096) of hint when hint's heap block, this
 * thread's, has a free slot of the size's class there; else, and for the
 * other methods, as vmalloc. */
void* vmallocnear(Vmalloc_t* vm, size_t size, void* hint, size_t near_bytes);
/* 0, or -1 if data is not a live block of vm (then nothing is freed, and
 * exceptf hears VM_BADADDR). Vmlast frees only its most recent block (-1
 * for any other, which waits for vmclear). */
int vmfree(Vmalloc_t* vm, void* data);
/* data NULL: vmalloc. size 0: vmfree, NULL. Without VM_RSMOVE the block
 * stays where it is or the call fails (ENOMEM). Vmdebug always moves. */
void* vmresize(Vmalloc_t* vm, void* data, size_t size, int type);
/* Frees every block at once. A named Vmbest region refuses (-1, EPROTO):
 * other processes' blocks are in it. */
int vmclear(Vmalloc_t* vm);
/* Gives free memory back to the system. */
int vmcompact(Vmalloc_t* vm);
int vmstat(Vmalloc_t* vm, Vmstat_t* st);
/* The offset of addr inside the live block holding it, or -1 (Vmpool and
 * Vmlast: 0 where a live block starts at addr, else -1). */
long vmaddr(Vmalloc_t* vm, void* addr);
/* The size of the live block data (Vmdebug and Vmprofile: the size asked
 * for; the others: its usable size), or -1. */
long vmsize(Vmalloc_t* vm, void* data);
/* The open region (Vmheap excluded) holding addr, or NULL. */
Vmalloc_t* vmregion(void* addr);
/* memd's: a named region may be mapped at another address in another
 * process or run, so a pointer kept in it or passed between processes is
 * an offset. vmoffset: addr's offset in vm's region, -1 if outside (or
 * vm is not a region of vmdcshm/vmdcfile/vmdcpmem or Vmdcheap/Vmdcsbrk with
 * Vmbest, Vmpool or Vmlast: EINVAL). vmpointer: the address of an offset
 * vmoffset gave, NULL if outside. */
long vmoffset(Vmalloc_t* vm, void* addr);
void* vmpointer(Vmalloc_t* vm, long offset);

/* Vmdebug: reports every live block whose guards are overwritten; returns
 * how many are (-1, EINVAL, for another method). */
int vmdbcheck(Vmalloc_t* vm);
/* Vmdebug: every call that meets addr says so ("alert"); -1 for another
 * method or when 16 addresses are watched already. */
int vmdbwatch(Vmalloc_t* vm, void* addr);
/* Vmprofile: writes the summary of vm (NULL: every Vmprofile region) to fd. */
int vmprofile(Vmalloc_t* vm, int fd);
/* Where VM_TRACE regions write their lines (-1: nowhere, the start);
 * returns the descriptor before. */
int vmtrace(int fd);

/* -DVMFL: the calls record their file and line. */
void vmflsite_(const char* file, int line);
#if defined(VMFL)
#define vmalloc(vm, n) (vmflsite_(__FILE__, __LINE__), vmalloc(vm, n))
#define vmalign(vm, n, a) (vmflsite_(__FILE__, __LINE__), vmalign(vm, n, a))
#define vmallocnear(vm, n, h, b) (vmflsite_(__FILE__, __LINE__), vmallocnear(vm, n, h, b))
#define vmfree(vm, d) (vmflsite_(__FILE__, __LINE__), vmfree(vm, d))
#define vmresize(vm, d, n, t) (vmflsite_(__FILE__, __LINE__), vmresize(vm, d, n, t))
#endif

#ifdef __cplusplus
}
#endif

#endif /* MEMD_VMALLOC_H_ */
