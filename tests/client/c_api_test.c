/* The C API, compiled as C: the header must be plain C, and every call must
 * behave as documented. Exits non-zero and says which check failed. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "client/memd.h"

static int failures = 0;
#define CHECK(cond)                                              \
  do {                                                           \
    if (!(cond)) {                                               \
      fprintf(stderr, "c_api_test:%d: %s\n", __LINE__, #cond);   \
      ++failures;                                                \
    }                                                            \
  } while (0)

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

  CHECK(memd_process_heap() != NULL);
  void* q = memd_alloc(memd_process_heap(), 10);
  CHECK(q != NULL);
  memd_free(memd_process_heap(), q);

  if (failures == 0) printf("c_api_test: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
