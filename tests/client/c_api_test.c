/* The C API, compiled as C: the header must be plain C, and every call must
 * behave as documented. Exits non-zero and says which check failed. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "client/memd.h"
#include "tests/support/c_chain_lists.h"

static int failures = 0;
#define CHECK(cond)                                              \
  do {                                                           \
    if (!(cond)) {                                               \
      fprintf(stderr, "c_api_test:%d: %s\n", __LINE__, #cond);   \
      ++failures;                                                \
    }                                                            \
  } while (0)

static void* heap_alloc(void* h, size_t size) { return memd_alloc((memd_heap*)h, size); }
static void heap_free(void* h, void* p) { memd_free((memd_heap*)h, p); }

int main(void) {
  memd_heap_options options = {0};
  options.reserve_bytes = (size_t)1 << 30;
  memd_heap* heap = memd_heap_open(&options);
  CHECK(heap != NULL);
  if (heap == NULL) return 1;

  char* p = memd_alloc(heap, 100);
  CHECK(p != NULL);
  memset(p, 7, 100);
  CHECK(memd_size(heap, p) >= 100);
  CHECK(memd_addr(heap, p + 50) == p);

  p = memd_resize(heap, p, 5000, MEMD_RESIZE_MOVE | MEMD_RESIZE_COPY);
  CHECK(p != NULL && p[99] == 7);

  unsigned char* z = memd_calloc(heap, 100, 10);
  int zero = 1;
  for (int i = 0; i < 1000; ++i) zero &= z[i] == 0;
  CHECK(zero);

  errno = 0;
  CHECK(memd_calloc(heap, SIZE_MAX, 2) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(memd_alloc(heap, SIZE_MAX) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(memd_alloc_aligned(heap, 48, 10) == NULL && errno == EINVAL);
  void* a = memd_alloc_aligned(heap, 4096, 10);
  CHECK(a != NULL && ((uintptr_t)a & 4095) == 0);

  memd_stats st;
  CHECK(memd_stat(heap, &st) == 0 && st.busy_objects == 3);
  errno = 0;
  CHECK(memd_stat(heap, NULL) == -1 && errno == EINVAL);
  errno = 0;
  CHECK(memd_size(heap, p + 1) == 0 && errno == EINVAL);

  char message[128];
  CHECK(memd_check(heap, message, sizeof message) == 0 && message[0] == '\0');

  memd_free(heap, p);
  memd_free(heap, z);
  memd_free(heap, a);
  memd_free(heap, NULL);
  CHECK(memd_compact(heap) == 0);
  CHECK(memd_stat(heap, &st) == 0 && st.busy_objects == 0 && st.pages_in_use == 0);
  CHECK(memd_clear(heap) == 0);
  memd_heap_close(heap);

  /* Call-chain pools: each call site's nodes in blocks of their own on the
   * heap that has them on, interleaved on one that does not. */
  memd_heap* pooled = memd_heap_open(NULL);
  memd_heap* plain = memd_heap_open(NULL);
  CHECK(pooled != NULL && plain != NULL);
  if (pooled != NULL && plain != NULL) {
    CHECK(memd_heap_set_chain_pools(pooled, 2) == -1 && errno == EINVAL);
    CHECK(memd_heap_set_chain_pools(pooled, 1) == 0);
    CHECK(chain_lists_adjacency(heap_alloc, heap_free, pooled, 4000) >= 0.9);
    double off = chain_lists_adjacency(heap_alloc, heap_free, plain, 4000);
    CHECK(off >= 0 && off <= 0.1);
  }
  if (pooled != NULL) memd_heap_close(pooled);
  if (plain != NULL) memd_heap_close(plain);

  CHECK(memd_process_heap() != NULL);
  void* q = memd_alloc(memd_process_heap(), 10);
  CHECK(q != NULL);
  memd_free(memd_process_heap(), q);

  if (failures == 0) printf("c_api_test: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
