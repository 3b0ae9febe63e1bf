/* Vmalloc's Vmregion under the malloc shim: with Vmregion set to a region,
 * malloc, calloc, realloc, strdup and free are served by it; set back to
 * Vmheap, by the process heap; a block keeps going to its own region
 * whatever Vmregion says later; a Vmdebug region catches an overwrite made
 * through plain malloc. Run with LD_PRELOAD=libmemd-malloc.so (the test
 * fails without it: malloc is then not memd's to redirect). */
#define _GNU_SOURCE 1
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/vmalloc.h"

static int failures;
#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                            \
    }                                                                        \
  } while (0)

/* Out of the compiler's sight, as such bugs are. */
__attribute__((noinline)) static void overrun(char* p, size_t n) { memset(p, 'x', n + 1); }

int main(void) {
  Vmalloc_t* best = vmopen(Vmdcheap, Vmbest, 0);
  Vmalloc_t* last = vmopen(Vmdcheap, Vmlast, 0);
  CHECK(best != NULL && last != NULL);
  CHECK(vmregionmalloc() == 1);
  CHECK(Vmregion == Vmheap);

  char* before = malloc(100);
  CHECK(before != NULL && vmregion(before) == NULL);

  Vmregion = best;
  char* a = malloc(100);
  char* z = calloc(10, 10);
  char* s = strdup("a string through Vmregion");
  CHECK(a != NULL && vmregion(a) == best);
  CHECK(z != NULL && vmregion(z) == best && z[0] == 0 && z[99] == 0);
  CHECK(s != NULL && vmregion(s) == best && strcmp(s, "a string through Vmregion") == 0);
  CHECK(malloc_usable_size(a) >= 100);
  memset(a, 'a', 100);
  a = realloc(a, 100000);
  CHECK(a != NULL && vmregion(a) == best && a[99] == 'a');
  Vmstat_t st;
  CHECK(vmstat(best, &st) == 0 && st.n_busy == 3);

  Vmregion = last;
  char* l1 = malloc(64);
  char* l2 = malloc(64);
  CHECK(l1 != NULL && l2 != NULL && vmregion(l1) == last && l2 == l1 + 64);

  Vmregion = Vmheap;
  char* after = malloc(100);
  CHECK(after != NULL && vmregion(after) == NULL);
  /* Blocks go back to their own regions. */
  free(a);
  free(z);
  free(s);
  CHECK(vmstat(best, &st) == 0 && st.n_busy == 0);
  free(before);
  free(after);
  CHECK(vmclear(last) == 0);

  /* An overwrite made through plain malloc, caught by Vmdebug at free. */
  Vmalloc_t* dbg = vmopen(Vmdcheap, Vmdebug, 0);
  Vmregion = dbg;
  char* d = malloc(8);
  overrun(d, 8);
  /* The report goes to stderr: into a file here, to read it back. */
  char path[] = "/tmp/memd-vmregion-XXXXXX";
  int out = mkstemp(path);
  int saved = dup(2);
  CHECK(out >= 0 && saved >= 0);
  dup2(out, 2);
  free(d);
  dup2(saved, 2);
  char text[2048] = "";
  lseek(out, 0, SEEK_SET);
  ssize_t n = read(out, text, sizeof text - 1);
  text[n > 0 ? n : 0] = '\0';
  close(out);
  unlink(path);
  /* Reported at the free, and freed; the sites are this program's calls. */
  CHECK(strstr(text, ":bad byte at=8:allocated at=") != NULL);
  CHECK(strstr(text, "vmregion_test+0x") != NULL && strstr(text, "libmemd-malloc") == NULL);
  if (failures != 0) fprintf(stderr, "report:\n%s", text);
  CHECK(vmdbcheck(dbg) == 0);
  Vmregion = Vmheap;
  /* Closing the region Vmregion names sets it back to Vmheap. */
  Vmregion = last;
  vmclose(last);
  CHECK(Vmregion == Vmheap);
  vmclose(best);
  vmclose(dbg);
  if (failures != 0) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("vmregion: every check passed\n");
  return 0;
}
