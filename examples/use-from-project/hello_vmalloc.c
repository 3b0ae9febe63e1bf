/* A program written for Vmalloc (Vo's vmalloc.h), built against memd
 * unchanged: a Vmlast region cleared after each round of a loop (the
 * paper's Figure 1), a Vmpool region of one size, and an exception handler
 * set with vmdisc that hears a bad free. Needs no daemon.
 *
 *   hello_vmalloc   ->   rounds=100 pool=1000 badaddr=1 ok
 */
#include <stdio.h>
#include <string.h>
#include <vmalloc.h>

static int bad_frees;
static int count_events(Vmalloc_t* vm, int type, void* obj, Vmdisc_t* disc) {
  (void)vm, (void)obj, (void)disc;
  if (type == VM_BADADDR) ++bad_frees;
  return 0;
}

int main(void) {
  Vmalloc_t* last = vmopen(Vmdcheap, Vmlast, 0);
  Vmalloc_t* pool = vmopen(Vmdcheap, Vmpool, 0);
  if (last == NULL || pool == NULL) {
    perror("vmopen");
    return 1;
  }
  int rounds = 0;
  for (int i = 0; i < 100; ++i) {
    char* line = vmalloc(last, 64);
    for (int j = 0; j < 50 && line != NULL; ++j) line = vmresize(last, line, 64 + 16 * j, VM_RSMOVE);
    if (line == NULL) break;
    snprintf(line, 64, "round %d", i);
    if (vmclear(last) != 0) break;
    ++rounds;
  }
  void* nodes[1000];
  int pooled = 0;
  for (int i = 0; i < 1000; ++i) pooled += (nodes[i] = vmalloc(pool, 48)) != NULL;
  for (int i = 0; i < 1000; ++i) vmfree(pool, nodes[i]);

  Vmdisc_t hearing = *Vmdcheap; /* the same memory, with a handler */
  hearing.exceptf = count_events;
  if (vmdisc(pool, &hearing) != Vmdcheap) {
    perror("vmdisc");
    return 1;
  }
  char* p = vmalloc(pool, 48);
  int refused = vmfree(pool, p + 8) == -1; /* not a block: refused, and the handler hears it */
  int ok = rounds == 100 && pooled == 1000 && refused && bad_frees == 1 && vmfree(pool, p) == 0;
  printf("rounds=%d pool=%d badaddr=%d %s\n", rounds, pooled, bad_frees, ok ? "ok" : "FAILED");
  vmclose(pool);
  vmclose(last);
  return ok ? 0 : 1;
}
