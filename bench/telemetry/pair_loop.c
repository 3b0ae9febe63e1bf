/* malloc/free pairs for instruction counting (instructions_per_pair.py).
 *
 *   pair_loop N SIZE 0   N times malloc(SIZE), write a byte, free
 *   pair_loop N SIZE 1   N/512 times: 512 mallocs, then their 512 frees
 *
 * Links no allocator: the one under test comes in with LD_PRELOAD. */
#include <stdio.h>
#include <stdlib.h>

enum { kBatch = 512 };

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: pair_loop N SIZE BATCH(0|1)\n");
    return 2;
  }
  long n = atol(argv[1]);
  size_t size = (size_t)atol(argv[2]);
  static char* ptrs[kBatch];
  if (atoi(argv[3]) == 0) {
    for (long i = 0; i < n; ++i) {
      char* volatile p = malloc(size);
      p[0] = 1;
      free(p);
    }
  } else {
    for (long i = 0; i < n / kBatch; ++i) {
      for (int j = 0; j < kBatch; ++j) {
        ptrs[j] = malloc(size);
        ptrs[j][0] = 1;
      }
      for (int j = 0; j < kBatch; ++j) free(ptrs[j]);
    }
  }
  return 0;
}
