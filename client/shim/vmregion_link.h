/* The boundary between vmalloc.h (in libmemd) and the malloc shim for
 * Vmalloc's Vmregion: a program that sets Vmregion to one of its regions
 * has malloc, free and realloc served by that region, as Vmalloc's own
 * malloc did. libmemd looks the shim's function up at the first vmopen;
 * without the shim, malloc is not memd's and Vmregion changes nothing. */
#ifndef MEMD_CLIENT_SHIM_VMREGION_LINK_H_
#define MEMD_CLIENT_SHIM_VMREGION_LINK_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* vmalloc.h's side. Regions are passed as void* (Vmalloc_t*). */
struct memd_vmregion_calls {
  void* const* current; /* &Vmregion, read at every call */
  const void* heap;     /* Vmheap: malloc's own heap */
  void* (*alloc)(void* vm, size_t size, size_t align);
  void* (*resize)(void* vm, void* p, size_t size);
  void (*free)(void* vm, void* p);
  size_t (*size)(void* vm, const void* p);
  void* (*region_of)(const void* p); /* the open region holding p, or NULL */
  /* Whether vm names its calls' sites (debug, profile, traced), and the
   * site of the program's next call to it (file NULL: pc). */
  int (*wants_site)(void* vm);
  void (*site)(const char* file, int line, const void* pc);
};

/* The shim's side: from now on malloc and its family follow *current. 0 on
 * success; -1 if the shim's heap is already redirected (MEMD_REGION, or the
 * shim's own debug method), and Vmregion is then not followed. */
typedef int (*memd_shim_use_vmregion_fn)(const struct memd_vmregion_calls* calls);
int memd_shim_use_vmregion(const struct memd_vmregion_calls* calls);

#ifdef __cplusplus
}
#endif

#endif
