/* malloc/free pairs for instruction counting (instructions_per_pair.py).
 *
 *   pair_loop N SIZE 0   N times malloc(SIZE), write a byte, free
 *   pair_loop N SIZE 1   N/512 times: 512 mallocs, then their 512 frees
 *   pair_loop N MAX 2    a ring of 4096 live objects of random sizes in [8, MAX]:
 *                        N times, free the oldest, malloc a new one, write its
 *                        first byte (steady state, caches and blocks in play;
 *                        counter_cost.py)
 *
 * Links no allocator: the one under test comes in with LD_PRELOAD. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { kBatch = 512, kRing = 4096 };

static int ring(long n, size_t max) {
  static char* live[kRing];
  uint64_t x = 88172645463325252ull;
  if (max < 8) return 2;
  for (long i = 0; i < n + kRing; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    long slot = i % kRing;
    free(live[slot]);
    live[slot] = malloc(8 + x % (max - 7));
    if (live[slot] == NULL) return 1;
    live[slot][0] = (char)i;
  }
  for (int i = 0; i < kRing; ++i) free(live[i]);
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: pair_loop N SIZE MODE(0 pair|1 batch|2 ring)\n");
    return 2;
  }
  long n = atol(argv[1]);
  size_t size = (size_t)atol(argv[2]);
  static char* ptrs[kBatch];
  if (atoi(argv[3]) == 2) return ring(n, size);
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
