// pair_loop: the cost of one malloc/free pair in steady state, for
// instruction counts under valgrind and for timing (bench/counter_cost.py).
// A ring of LIVE objects; each step frees the oldest and allocates a new one
// of a random size in [8, MAX] bytes, writing its first byte (the pattern of
// the issue: sizes 8-512 B, 4096 live objects replaced, first byte touched).
//
//   pair_loop PAIRS [MAX=512] [LIVE=4096]
// Links no allocator of its own: the shim under test comes by LD_PRELOAD.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: pair_loop PAIRS [MAX=512] [LIVE=4096]\n");
    return 2;
  }
  uint64_t pairs = strtoull(argv[1], NULL, 10);
  uint64_t max = argc > 2 ? strtoull(argv[2], NULL, 10) : 512;
  uint64_t live = argc > 3 ? strtoull(argv[3], NULL, 10) : 4096;
  if (max < 8 || live == 0) return 2;
  char** ring = calloc(live, sizeof *ring);
  if (ring == NULL) return 1;
  uint64_t x = 88172645463325252ull, sum = 0;
  for (uint64_t i = 0; i < pairs + live; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    size_t size = 8 + x % (max - 7);
    uint64_t slot = i % live;
    free(ring[slot]);
    char* p = malloc(size);
    if (p == NULL) return 1;
    p[0] = (char)i;
    ring[slot] = p;
    sum += (unsigned char)p[0];
  }
  for (uint64_t i = 0; i < live; ++i) free(ring[i]);
  free(ring);
  printf("checksum=%llu\n", (unsigned long long)sum);
  return 0;
}
