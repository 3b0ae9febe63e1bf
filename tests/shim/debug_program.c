/* Exercises the debug method of libmemd-malloc.so (VMDEBUG=1) case by case:
 *   debug_program CASE
 * Each case makes at most one error, on purpose, and prints what the test
 * (check_debug_method.py) compares: the addresses it wants watched or named,
 * and "ok" when the program's own checks of what the allocator returned
 * (contents, alignment, sizes) passed. No VMFL here: sites are return
 * addresses. */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char* what) {
  printf("FAILED: %s\n", what);
  return 1;
}

static void* churn(void* arg) {
  unsigned seed = (unsigned)(uintptr_t)arg;
  char* live[64] = {0};
  for (int i = 0; i < 20000; ++i) {
    int slot = rand_r(&seed) % 64;
    free(live[slot]);
    size_t n = 1 + rand_r(&seed) % 300;
    live[slot] = malloc(n);
    if (live[slot] == NULL) return (void*)1;
    memset(live[slot], slot, n);
  }
  for (int i = 0; i < 64; ++i) free(live[i]);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const char* c = argv[1];
  if (strcmp(c, "clean") == 0) {
    /* Everything right: calloc zeroes, realloc keeps contents, aligned
     * allocations are aligned, usable size is what was asked; threads. */
    unsigned char* z = calloc(100, 3);
    for (int i = 0; i < 300; ++i) if (z[i] != 0) return fail("calloc");
    char* r = malloc(10);
    memcpy(r, "abcdefghi", 10);
    r = realloc(r, 5000);
    if (strcmp(r, "abcdefghi") != 0) return fail("realloc grow");
    r = realloc(r, 3);
    if (memcmp(r, "abc", 3) != 0) return fail("realloc shrink");
    void* a = memalign(256, 1000);
    if ((uintptr_t)a % 256 != 0) return fail("memalign");
    void* b;
    if (posix_memalign(&b, 64, 77) != 0 || (uintptr_t)b % 64 != 0) return fail("posix_memalign");
    if (malloc_usable_size(r) != 3) return fail("usable size");
    if ((uintptr_t)malloc(24) % 16 != 0) return fail("16-byte alignment");
    pthread_t t[4];
    for (int i = 0; i < 4; ++i) pthread_create(&t[i], NULL, churn, (void*)(uintptr_t)(i + 1));
    for (int i = 0; i < 4; ++i) {
      void* rc;
      pthread_join(t[i], &rc);
      if (rc != NULL) return fail("thread");
    }
    free(z), free(r), free(a), free(b);
  } else if (strcmp(c, "underrun") == 0) {
    char* p = malloc(8);
    p[-1] = 'x';  /* the byte before the block */
    free(p);
  } else if (strcmp(c, "overrun") == 0) {
    char* p = malloc(8);
    printf("block %p\n", (void*)p);
    p[8 + 3] = 'x';  /* the fourth byte past the end */
    free(p);
  } else if (strcmp(c, "after_free") == 0) {
    char* p = malloc(32);
    printf("block %p\n", (void*)p);
    free(p);
    p[5] = 'x';  /* written after free: seen when the quarantine is checked */
  } else if (strcmp(c, "realloc_freed") == 0) {
    char* p = malloc(32);
    free(p);
    if (realloc(p, 64) != NULL) return fail("realloc of a freed block returned memory");
  } else if (strcmp(c, "interior") == 0) {
    char* p = malloc(64);
    free(p + 16);  /* not a block's start */
    free(p);
  } else {
    return 2;
  }
  printf("ok\n");
  return 0;
}
