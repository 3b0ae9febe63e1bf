/* File and line of each allocation call, for memd's debug method (VMDEBUG,
 * MEMD_METHOD=debug under libmemd-malloc.so): Vmalloc's -DVMFL. Include it
 * after the C library's headers (it makes malloc, calloc, realloc and free
 * macros) and compile with -DVMFL (or -DMEMD_DEBUG_SITES), and the
 * debug method's reports say "allocated at=t.c,4" and "detected at=t.c,19"
 * instead of return addresses.
 *
 * The calls stay the C library's: under another malloc the site is not
 * recorded (memd_debug_site is a weak reference, null when memd's shim is
 * not loaded), so a program built this way runs anywhere. */
#ifndef MEMD_CLIENT_MEMD_DEBUG_H_
#define MEMD_CLIENT_MEMD_DEBUG_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Records the site of the calling thread's next allocation call (malloc,
 * calloc, realloc, free and the aligned ones); that call consumes it. */
void memd_debug_site(const char* file, int line) __attribute__((weak));

#ifdef __cplusplus
}
#endif

#if defined(VMFL) || defined(MEMD_DEBUG_SITES)
#define MEMD_DEBUG_AT_() (memd_debug_site ? memd_debug_site(__FILE__, __LINE__) : (void)0)
#define malloc(n) (MEMD_DEBUG_AT_(), malloc(n))
#define calloc(n, s) (MEMD_DEBUG_AT_(), calloc(n, s))
#define realloc(p, n) (MEMD_DEBUG_AT_(), realloc(p, n))
#define free(p) (MEMD_DEBUG_AT_(), free(p))
#endif

#endif
