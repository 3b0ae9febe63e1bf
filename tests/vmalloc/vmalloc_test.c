/* vmalloc.h from a C program: each method's semantics (and what pool and
 * last refuse), resize types, vmstat, vmaddr, vmsize, vmregion, exception
 * events, vmdisc, vmallocnear and VM_CHAINPOOL, the paper's Figure 1 loop, Figure 8 under Vmdebug with its
 * reports (and a watched address), Figure 10's profile totals, VM_TRACE
 * lines, a file region across processes, and threads. Usage:
 *   vmalloc_test [scratch-dir]   (default: $TMPDIR or /tmp) */
#define _GNU_SOURCE 1 /* mkdtemp, dup2 and fork under -std=c11 too */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client/vmalloc.h"
#include "tests/support/c_chain_lists.h"

extern Vmalloc_t* figure8_vm;
void figure8(void);

static int failures;
#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                          \
    }                                                                      \
  } while (0)

static char scratch[512];

/* --- exception events --- */
static int events[5];
static void* last_badaddr;
static int record_event(Vmalloc_t* vm, int type, void* obj, Vmdisc_t* disc) {
  (void)vm, (void)disc;
  if (type >= 0 && type < 5) ++events[type];
  if (type == VM_BADADDR) last_badaddr = obj;
  return 0;
}

/* Figure 1: a Vmlast region cleared at the bottom of each iteration. */
static void figure1_last(void) {
  Vmalloc_t* vm = vmopen(Vmdcheap, Vmlast, 0);
  CHECK(vm != NULL);
  char* first = NULL;
  for (int round = 0; round < 50; ++round) {
    char* keep = vmalloc(vm, 100);
    CHECK(keep != NULL);
    if (round == 0) first = keep;
    CHECK(keep == first); /* vmclear gave everything back: the same place again */
    memset(keep, 'k', 100);
    char* b = vmalloc(vm, 40);
    memset(b, 'b', 40);
    b = vmresize(vm, b, 4000, VM_RSMOVE | VM_RSCOPY);
    CHECK(b != NULL && b[0] == 'b' && b[39] == 'b');
    CHECK(vmsize(vm, b) >= 4000);
    CHECK(vmfree(vm, keep) == -1); /* not the most recent: waits for vmclear */
    CHECK(keep[99] == 'k');
    CHECK(vmfree(vm, b) == 0);
    char* again = vmalloc(vm, 16);
    CHECK(again == b); /* the most recent block's space is used again */
    Vmstat_t st;
    CHECK(vmstat(vm, &st) == 0 && st.s_busy >= 116 && (st.mode >> 8) == VM_MTLAST);
    CHECK(vmclear(vm) == 0);
    CHECK(vmstat(vm, &st) == 0 && st.s_busy == 0);
    CHECK(vmcompact(vm) == 0);
  }
  CHECK(vmclose(vm) == 0);
}

static void pool(void) {
  Vmdisc_t disc = *Vmdcsbrk;
  disc.exceptf = record_event;
  memset(events, 0, sizeof events);
  Vmalloc_t* vm = vmopen(&disc, Vmpool, 0);
  CHECK(vm != NULL);
  CHECK(events[VM_OPEN] == 1);
  void* p[100];
  for (int i = 0; i < 100; ++i) {
    p[i] = vmalloc(vm, 24);
    CHECK(p[i] != NULL);
    CHECK(vmregion(p[i]) == vm);
  }
  errno = 0;
  CHECK(vmalloc(vm, 32) == NULL && errno == EINVAL); /* one size: the first allocation's */
  CHECK(vmsize(vm, p[3]) >= 24);
  CHECK(vmaddr(vm, p[3]) == 0);
  Vmstat_t st;
  CHECK(vmstat(vm, &st) == 0 && st.n_busy >= 100);
  CHECK(vmresize(vm, p[5], 16, 0) == p[5]); /* smaller: in place */
  errno = 0;
  CHECK(vmresize(vm, p[5], 4096, VM_RSMOVE) == NULL);
  CHECK(vmfree(vm, p[7]) == 0);
  CHECK(vmfree(vm, p[7]) == -1); /* a double free is refused and reported */
  CHECK(events[VM_BADADDR] >= 1 && last_badaddr == p[7]);
  CHECK(vmsize(vm, p[7]) == -1);
  for (int i = 0; i < 100; ++i) {
    if (i != 7) CHECK(vmfree(vm, p[i]) == 0);
  }
  CHECK(vmclear(vm) == 0);
  void* big = vmalloc(vm, 1000); /* vmclear: the next allocation fixes the size anew */
  CHECK(big != NULL && vmsize(vm, big) >= 1000);
  CHECK(vmclose(vm) == 0);
  CHECK(events[VM_CLOSE] == 1);
}

static void best(void) {
  Vmdisc_t disc = *Vmdcheap;
  disc.exceptf = record_event;
  memset(events, 0, sizeof events);
  Vmalloc_t* vm = vmopen(&disc, Vmbest, 0);
  CHECK(vm != NULL);
  Vmstat_t st;
  CHECK(vmstat(vm, &st) == 0 && st.n_busy == 0);
  char* p[100];
  for (int i = 0; i < 100; ++i) {
    size_t n = 8 + (size_t)i * 97;
    p[i] = vmalloc(vm, n);
    CHECK(p[i] != NULL);
    memset(p[i], i, n);
    CHECK(vmsize(vm, p[i]) >= (long)n);
    CHECK(vmaddr(vm, p[i] + n / 2) == (long)(n / 2));
  }
  int local;
  CHECK(vmaddr(vm, &local) == -1);
  CHECK(vmregion(&local) == NULL);
  CHECK(vmregion(p[50]) == vm);
  CHECK(vmstat(vm, &st) == 0 && st.n_busy == 100 && st.extent > 0);
  char* a = vmalign(vm, 100, 4096);
  CHECK(a != NULL && ((uintptr_t)a & 4095) == 0);
  CHECK(vmfree(vm, a) == 0);
  errno = 0;
  CHECK(vmalign(vm, 100, 3000) == NULL && errno == EINVAL);

  /* Resize types: no VM_RSMOVE stays in place or fails; VM_RSCLEAR zeroes. */
  long usable = vmsize(vm, p[0]);
  errno = 0;
  CHECK(vmresize(vm, p[0], (size_t)usable + 100000, 0) == NULL && errno == ENOMEM);
  CHECK(p[0][0] == 0 && vmsize(vm, p[0]) == usable);
  char* q = vmresize(vm, p[1], 200000, VM_RSMOVE | VM_RSCOPY | VM_RSCLEAR);
  CHECK(q != NULL && q[0] == 1 && q[104] == 1);
  CHECK(q[199999] == 0 && q[150000] == 0);
  p[1] = q;

  CHECK(vmfree(vm, &local) == -1); /* not a block of the region */
  CHECK(events[VM_BADADDR] == 1 && last_badaddr == &local);
  for (int i = 0; i < 100; ++i) CHECK(vmfree(vm, p[i]) == 0);
  CHECK(vmstat(vm, &st) == 0 && st.n_busy == 0);
  CHECK(vmcompact(vm) == 0);

  /* vmclear of a private best region: a fresh heap. */
  char* x = vmalloc(vm, 64);
  CHECK(vmclear(vm) == 0);
  CHECK(vmstat(vm, &st) == 0 && st.n_busy == 0);
  x = vmalloc(vm, 64);
  CHECK(x != NULL && vmsize(vm, x) >= 64);
  CHECK(vmclose(vm) == 0);

  /* Vmheap is malloc. */
  char* h = vmalloc(Vmheap, 50);
  CHECK(h != NULL && vmsize(Vmheap, h) >= 50);
  h = vmresize(Vmheap, h, 5000, VM_RSMOVE | VM_RSCLEAR);
  CHECK(h != NULL && h[4999] == 0);
  CHECK(vmfree(Vmheap, h) == 0);
  CHECK(vmclose(Vmheap) == -1);
}

/* Addresses that are not blocks, inside and outside a region, and a NULL
 * region: an answer and an errno, never a crash. */
static void bad_addresses(void) {
  Vmalloc_t* methods[3] = {vmopen(Vmdcheap, Vmbest, 0), vmopen(Vmdcheap, Vmpool, 0), vmopen(Vmdcheap, Vmdebug, 0)};
  for (int m = 0; m < 3; ++m) {
    Vmalloc_t* vm = methods[m];
    CHECK(vm != NULL);
    if (vm == NULL) continue;
    char* p = vmalloc(vm, 64);
    CHECK(p != NULL);
    char* far = p + (256 << 20); /* inside the 1 GiB reservation, never used */
    char* inside = p + 8;
    int fd = dup(2), null = open("/dev/null", O_WRONLY);
    dup2(null, 2); /* the reports are expected; the answers are checked */
    CHECK(vmsize(vm, inside) == -1 && vmsize(vm, far) == -1 && vmsize(vm, (void*)16) == -1);
    CHECK(vmaddr(vm, far) == -1 && vmaddr(vm, (void*)16) == -1);
    CHECK(vmfree(vm, inside) == -1 && vmfree(vm, far) == -1 && vmfree(vm, (void*)16) == -1);
    errno = 0;
    CHECK(vmresize(vm, far, 100, VM_RSMOVE) == NULL);
    CHECK(vmresize(vm, inside, 100, VM_RSMOVE) == NULL);
    dup2(fd, 2);
    close(fd);
    close(null);
    CHECK(vmsize(vm, p) >= 64 && vmfree(vm, p) == 0); /* the block itself is untouched */
    vmclose(vm);
  }
  errno = 0;
  CHECK(vmalloc(NULL, 8) == NULL && errno == EINVAL);
  CHECK(vmfree(NULL, (void*)16) == -1 && vmclose(NULL) == -1 && vmclear(NULL) == -1);
  CHECK(vmsize(NULL, (void*)16) == -1 && vmaddr(NULL, (void*)16) == -1 && vmstat(NULL, NULL) == -1);
}

static void refused(void) {
  Vmdisc_t own = *Vmdcheap;
  own.memoryf = NULL; /* a memoryf of the program's own */
  errno = 0;
  CHECK(vmopen(&own, Vmbest, 0) == NULL && errno == EINVAL);
  Vmdisc_t named;
  errno = 0;
  CHECK(vmopen(vmdcshm(&named, NULL, 0), Vmdebug, 0) == NULL && errno == EINVAL);
  errno = 0;
  CHECK(vmopen(Vmdcheap, Vmbest, 0x100) == NULL && errno == EINVAL);
  errno = 0;
  CHECK(vmopen(Vmdcheap, NULL, 0) == NULL && errno == EINVAL);
  Vmalloc_t* vm = vmopen(Vmdcheap, Vmbest, 0);
  errno = 0;
  CHECK(vmdbcheck(vm) == -1 && errno == EINVAL);
  CHECK(vmprofile(vm, 2) == -1);
  vmclose(vm);
}

/* vmdisc: the discipline now, a change of exceptf (the old one hears
 * VM_DISC and may refuse), and no change of memory. */
static int refuse_disc(Vmalloc_t* vm, int type, void* obj, Vmdisc_t* disc) {
  (void)vm, (void)obj, (void)disc;
  return type == VM_DISC ? -1 : 0;
}
static Vmdisc_t* disc_offered;
static int allow_disc(Vmalloc_t* vm, int type, void* obj, Vmdisc_t* disc) {
  (void)vm, (void)disc;
  if (type == VM_DISC) disc_offered = obj;
  return 0;
}
static void change_discipline(void) {
  Vmalloc_t* vm = vmopen(Vmdcheap, Vmbest, 0);
  CHECK(vm != NULL);
  if (vm == NULL) return;
  CHECK(vmdisc(vm, NULL) == Vmdcheap);
  /* A copy with an exceptf: the same memory, so the change is made, and
   * the region's events now go to the new exceptf. */
  Vmdisc_t hearing = *Vmdcheap;
  hearing.exceptf = allow_disc;
  CHECK(vmdisc(vm, &hearing) == Vmdcheap && vmdisc(vm, NULL) == &hearing);
  Vmdisc_t refusing = hearing;
  refusing.exceptf = refuse_disc;
  CHECK(vmdisc(vm, &refusing) == &hearing && disc_offered == &refusing);
  char* p = vmalloc(vm, 32);
  CHECK(p != NULL);
  /* The refusing discipline keeps itself. */
  errno = 0;
  CHECK(vmdisc(vm, &hearing) == NULL && errno == ECANCELED && vmdisc(vm, NULL) == &refusing);
  refusing.exceptf = record_event;
  memset(events, 0, sizeof events);
  int fd = dup(2), null = open("/dev/null", O_WRONLY);
  dup2(null, 2); /* the report of the bad free is expected */
  CHECK(vmfree(vm, p + 8) == -1);
  dup2(fd, 2);
  close(fd);
  close(null);
  CHECK(events[VM_BADADDR] == 1 && last_badaddr == p + 8);
  /* Other memory: refused, and nothing changes. */
  Vmdisc_t named;
  errno = 0;
  CHECK(vmdisc(vm, vmdcshm(&named, "/memd-vmdisc-test", 0)) == NULL && errno == EINVAL);
  Vmdisc_t own = *Vmdcheap;
  own.memoryf = NULL;
  errno = 0;
  CHECK(vmdisc(vm, &own) == NULL && errno == EINVAL && vmdisc(vm, NULL) == &refusing);
  CHECK(vmsize(vm, p) >= 32 && vmfree(vm, p) == 0);
  CHECK(vmclose(vm) == 0);
  errno = 0;
  CHECK(vmdisc(NULL, Vmdcheap) == NULL && errno == EINVAL);

  /* A named region: the same name is the same memory; another is not. */
  char path[600], other[600];
  snprintf(path, sizeof path, "%s/disc.region", scratch);
  snprintf(other, sizeof other, "%s/other.region", scratch);
  Vmdisc_t file, same, elsewhere;
  vm = vmopen(vmdcfile(&file, path, 16 << 20), Vmpool, 0);
  CHECK(vm != NULL);
  if (vm == NULL) return;
  char copy[600];
  strcpy(copy, path); /* the same name in another string */
  vmdcfile(&same, copy, 16 << 20);
  same.exceptf = allow_disc;
  CHECK(vmdisc(vm, &same) == &file && vmdisc(vm, NULL) == &same);
  errno = 0;
  CHECK(vmdisc(vm, vmdcfile(&elsewhere, other, 16 << 20)) == NULL && errno == EINVAL);
  errno = 0;
  CHECK(vmdisc(vm, vmdcshm(&elsewhere, copy, 16 << 20)) == NULL && errno == EINVAL);
  CHECK(vmdisc(vm, Vmdcheap) == NULL);
  CHECK(vmclose(vm) == 0);
  unlink(path);
}

/* memd's locality calls: vmallocnear takes the hint's free neighbour in
 * a Vmbest region (and is vmalloc elsewhere); VM_CHAINPOOL gives each
 * busy call chain blocks of its own. */
static void* vm_alloc_fn(void* vm, size_t size) { return vmalloc((Vmalloc_t*)vm, size); }
static void vm_free_fn(void* vm, void* p) { vmfree((Vmalloc_t*)vm, p); }
static void locality(void) {
  Vmalloc_t* vm = vmopen(Vmdcheap, Vmbest, 0);
  CHECK(vm != NULL);
  if (vm == NULL) return;
  enum { kObjects = 512 };
  static char* v[kObjects];
  for (int i = 0; i < kObjects; ++i) v[i] = vmalloc(vm, 64);
  /* An object with its neighbour 64 B below and one 30 objects above, all
   * in one page (a block of small objects is a page). */
  int k = 1;
  for (; k + 30 < kObjects; ++k) {
    uintptr_t below = (uintptr_t)v[k - 1], at = (uintptr_t)v[k], above = (uintptr_t)v[k + 30];
    if (at - below == 64 && above - at == 30 * 64 && below >> 12 == above >> 12) break;
  }
  CHECK(k + 30 < kObjects);
  if (k + 30 < kObjects) {
    char* neighbour = v[k - 1];
    vmfree(vm, neighbour);
    vmfree(vm, v[k + 30]); /* now first on the block's free list: what vmalloc would give */
    char* p = vmallocnear(vm, 64, v[k], 64);
    CHECK(p == neighbour);
    v[k - 1] = p;
    char* q = vmallocnear(vm, 64, v[k], 0); /* 0: a page */
    CHECK(q == v[k + 30]);
    v[k + 30] = q;
  }
  /* Any other hint is harmless: no block there, or another size's. */
  int local;
  char* r = vmallocnear(vm, 64, &local, 64);
  char* t = vmallocnear(vm, 1000, v[0], 64);
  CHECK(r != NULL && vmsize(vm, r) >= 64 && t != NULL && vmsize(vm, t) >= 1000);
  CHECK(vmfree(vm, r) == 0 && vmfree(vm, t) == 0);
  for (int i = 0; i < kObjects; ++i) CHECK(vmfree(vm, v[i]) == 0);
  Vmstat_t st;
  CHECK(vmstat(vm, &st) == 0 && st.n_busy == 0);
  /* Without pools the two lists interleave. */
  double plain = chain_lists_adjacency(vm_alloc_fn, vm_free_fn, vm, 4000);
  CHECK(plain >= 0 && plain <= 0.1);
  vmclose(vm);

  vm = vmopen(Vmdcheap, Vmbest, VM_CHAINPOOL);
  CHECK(vm != NULL);
  if (vm != NULL) {
    CHECK(chain_lists_adjacency(vm_alloc_fn, vm_free_fn, vm, 4000) >= 0.9);
    CHECK(vmstat(vm, &st) == 0 && st.n_busy == 0);
    vmclose(vm);
  }
  errno = 0;
  CHECK(vmopen(Vmdcheap, Vmpool, VM_CHAINPOOL) == NULL && errno == EINVAL);

  /* A pool has one size and no placement: the hint is ignored. */
  vm = vmopen(Vmdcheap, Vmpool, 0);
  CHECK(vm != NULL);
  if (vm == NULL) return;
  char* a = vmalloc(vm, 48);
  char* b = vmallocnear(vm, 48, a, 64);
  CHECK(a != NULL && b != NULL && a != b && vmsize(vm, b) >= 48);
  CHECK(vmfree(vm, a) == 0 && vmfree(vm, b) == 0);
  vmclose(vm);
}

/* Runs fn in a child whose stderr goes to `out`; its exit status. */
static int in_child(void (*fn)(void* arg), void* arg, const char* out) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    failures = 0; /* the child's own checks */
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
    fn(arg);
    _exit(failures == 0 ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static char* slurp(const char* path) {
  static char buf[1 << 16];
  FILE* f = fopen(path, "r");
  size_t n = f != NULL ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f != NULL) fclose(f);
  buf[n] = '\0';
  return buf;
}

static void run_figure8(void* watch) {
  figure8_vm = vmopen(Vmdcheap, Vmdebug, VM_DBCHECK);
  CHECK(figure8_vm != NULL);
  if (watch != NULL) CHECK(vmdbwatch(figure8_vm, watch) == 0);
  figure8();
  /* The block line 4 overwrote is still live (foo leaks it). */
  CHECK(vmdbcheck(figure8_vm) == 1);
  vmclose(figure8_vm);
}

/* The three reports of Figure 9, in its order, then the watched run. */
static void figure8_reports(void) {
  char out[600];
  snprintf(out, sizeof out, "%s/figure8.err", scratch);
  CHECK(in_child(run_figure8, NULL, out) == 0);
  char* text = slurp(out);
  char* corrupted = strstr(text, "memd: corrupted data:region=0x");
  char* literal = strstr(text, "memd: free error:region=0x");
  char* twice = strstr(text, ":already freed:detected at=t.c,19:");
  CHECK(corrupted != NULL && strstr(corrupted, ":bad byte at=4:allocated at=t.c,4:") != NULL);
  CHECK(literal != NULL && strstr(literal, ":unallocated block:detected at=t.c,6:") != NULL);
  CHECK(twice != NULL);
  CHECK(corrupted != NULL && literal != NULL && twice != NULL && corrupted < literal && literal < twice);
  if (failures != 0) fprintf(stderr, "figure 8 reports:\n%s", text);
  /* The block freed twice, as the report names it: watch it in a run that
   * makes the same calls in a child of the same parent (the same address). */
  char* line = twice;
  while (line != NULL && line > text && line[-1] != '\n') --line;
  char* at = line != NULL ? strstr(line, ":block=0x") : NULL;
  CHECK(at != NULL && at < twice);
  if (at == NULL) return;
  void* address = (void*)(uintptr_t)strtoull(at + 7, NULL, 16);
  CHECK(in_child(run_figure8, address, out) == 0);
  text = slurp(out);
  char* born = strstr(text, ":size=5:just allocated:detected at=t.c,10:");
  char* dies = strstr(text, ":size=5:being freed:detected at=t.c,12:");
  CHECK(born != NULL && dies != NULL && born < dies);
  if (born == NULL || dies == NULL) fprintf(stderr, "watched run:\n%s", text);
}

/* Figure 8 on a named file region: the debug method's books are in the
 * region, so the reports are Figure 9's and another process, opening the
 * region later, finds the overwritten block the first one leaked. */
static char named_path[600];
static void run_figure8_named(void* meth) {
  Vmdisc_t d;
  figure8_vm = vmopen(vmdcfile(&d, named_path, 0), (Vmethod_t*)meth, VM_DBCHECK);
  CHECK(figure8_vm != NULL);
  if (figure8_vm == NULL) return;
  figure8();
  vmclose(figure8_vm);
}

static void check_named_later(void* unused) {
  (void)unused;
  Vmdisc_t d;
  errno = 0;
  CHECK(vmopen(vmdcfile(&d, named_path, 0), Vmbest, 0) == NULL); /* made with Vmdebug */
  Vmalloc_t* vm = vmopen(vmdcfile(&d, named_path, 0), Vmdebug, 0);
  CHECK(vm != NULL);
  if (vm == NULL) return;
  /* Reported by the first process already: counted, not reported again. */
  CHECK(vmdbcheck(vm) == 1);
  Vmstat_t st;
  CHECK(vmstat(vm, &st) == 0 && st.n_busy == 1 && st.s_busy == 4);
  vmclose(vm);
}

static void figure8_named_region(void) {
  char out[600], later[600];
  snprintf(named_path, sizeof named_path, "%s/figure8.region", scratch);
  snprintf(out, sizeof out, "%s/figure8-named.err", scratch);
  snprintf(later, sizeof later, "%s/figure8-later.err", scratch);
  CHECK(in_child(run_figure8_named, Vmdebug, out) == 0);
  char* text = slurp(out);
  char prefix[700];
  snprintf(prefix, sizeof prefix, "memd: corrupted data:region=%s:block=0x", named_path);
  char* corrupted = strstr(text, prefix);
  char* literal = strstr(text, ":unallocated block:detected at=t.c,6:");
  char* twice = strstr(text, ":already freed:detected at=t.c,19:");
  CHECK(corrupted != NULL && strstr(corrupted, ":bad byte at=4:allocated at=t.c,4:") != NULL);
  CHECK(corrupted != NULL && literal != NULL && twice != NULL && corrupted < literal && literal < twice);
  if (failures != 0) fprintf(stderr, "figure 8 on a named region:\n%s", text);
  CHECK(in_child(check_named_later, NULL, later) == 0);
  if (failures != 0) fprintf(stderr, "the later process:\n%s", slurp(later));
}

/* Vmprofile on a named file region: two processes run Figure 8 one after
 * the other and one summary counts both. */
static void run_profile_named(void* fd) {
  Vmdisc_t d;
  figure8_vm = vmopen(vmdcfile(&d, named_path, 0), Vmprofile, 0);
  CHECK(figure8_vm != NULL);
  if (figure8_vm == NULL) return;
  figure8();
  if ((int)(intptr_t)fd >= 0) CHECK(vmprofile(figure8_vm, (int)(intptr_t)fd) == 0);
  vmclose(figure8_vm);
}

static void profile_named_region(void) {
  char path[600], err[600];
  snprintf(named_path, sizeof named_path, "%s/figure8-profile.region", scratch);
  snprintf(path, sizeof path, "%s/figure8-named.profile", scratch);
  snprintf(err, sizeof err, "%s/figure8-named-profile.err", scratch);
  CHECK(in_child(run_profile_named, (void*)(intptr_t)-1, err) == 0);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  CHECK(in_child(run_profile_named, (void*)(intptr_t)fd, err) == 0);
  close(fd);
  char* text = slurp(path);
  CHECK(strstr(text, "ALLOCATION USAGE SUMMARY:n_alloc=4:n_free=2:s_alloc=18:s_free=10:\n") == text);
  CHECK(strstr(text, "file=t.c:n_alloc=4:n_free=2:s_alloc=18:s_free=10:\n") != NULL);
  CHECK(strstr(text, "    line=4:region=") != NULL && strstr(text, ":n_alloc=2:n_free=0:s_alloc=8:s_free=0:\n") != NULL);
  CHECK(strstr(text, "    line=10:region=") != NULL && strstr(text, ":n_alloc=2:n_free=2:s_alloc=10:s_free=10:\n") != NULL);
  if (failures != 0) fprintf(stderr, "profile of a named region:\n%s", text);
}

static void run_profile(void* fd) {
  figure8_vm = vmopen(Vmdcheap, Vmprofile, 0);
  CHECK(figure8_vm != NULL);
  figure8();
  CHECK(vmprofile(figure8_vm, (int)(intptr_t)fd) == 0);
  vmclose(figure8_vm);
}

/* Figure 10's profile of the same program: what it allocated and freed. */
static void figure10_profile(void) {
  char path[600], err[600];
  snprintf(path, sizeof path, "%s/figure8.profile", scratch);
  snprintf(err, sizeof err, "%s/figure8-profile.err", scratch);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  CHECK(in_child(run_profile, (void*)(intptr_t)fd, err) == 0);
  close(fd);
  char* text = slurp(path);
  CHECK(strstr(text, "ALLOCATION USAGE SUMMARY:n_alloc=2:n_free=1:s_alloc=9:s_free=5:\n") == text);
  CHECK(strstr(text, ":n_alloc=2:n_free=1:s_alloc=9:s_free=5:max_busy=9:extent=") != NULL);
  CHECK(strstr(text, "file=t.c:n_alloc=2:n_free=1:s_alloc=9:s_free=5:\n") != NULL);
  CHECK(strstr(text, "    line=4:region=0x") != NULL);
  CHECK(strstr(text, ":n_alloc=1:n_free=0:s_alloc=4:s_free=0:\n") != NULL);
  CHECK(strstr(text, ":n_alloc=1:n_free=1:s_alloc=5:s_free=5:\n") != NULL);
  if (failures != 0) fprintf(stderr, "profile:\n%s", text);
}

/* VM_TRACE: a line per call, in docs/trace.md's format. */
static void trace(void) {
  char path[600];
  snprintf(path, sizeof path, "%s/vm.trace", scratch);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  CHECK(vmtrace(fd) == -1);
  Vmalloc_t* vm = vmopen(Vmdcheap, Vmbest, VM_TRACE);
  Vmalloc_t* quiet = vmopen(Vmdcheap, Vmbest, 0);
  char* a = vmalloc(vm, 10);
  char* b = vmalloc(quiet, 10); /* not traced */
  char* c = vmresize(vm, a, 50000, VM_RSMOVE);
  CHECK(vmfree(vm, c) == 0);
  CHECK(vmfree(quiet, b) == 0);
  Vmalloc_t* dbg = vmopen(Vmdcheap, Vmdebug, VM_TRACE);
  char* d = vmalloc(dbg, 7);
  vmfree(dbg, d);
  CHECK(vmtrace(-1) == fd);
  close(fd);
  char* text = slurp(path);
  char want[256];
  snprintf(want, sizeof want, "0x0:%p:10:%p:best:", (void*)a, (void*)vm);
  CHECK(strncmp(text, want, strlen(want)) == 0);
  snprintf(want, sizeof want, "\n%p:%p:50000:%p:best:", (void*)a, (void*)c, (void*)vm);
  CHECK(strstr(text, want) != NULL);
  snprintf(want, sizeof want, "\n%p:0x0:", (void*)c);
  CHECK(strstr(text, want) != NULL);
  snprintf(want, sizeof want, "\n0x0:%p:7:%p:debug:", (void*)d, (void*)dbg);
  CHECK(strstr(text, want) != NULL);
  int lines = 0;
  for (char* s = text; *s; ++s) lines += *s == '\n';
  CHECK(lines == 5);
  if (failures != 0) fprintf(stderr, "trace:\n%s", text);
  vmclose(vm);
  vmclose(quiet);
  vmclose(dbg);
}

/* A file region: its blocks and its method outlive the process. */
static char file_path[600];
static long file_block; /* its offset: the region may be mapped elsewhere next time */
static void reopen_file(void* arg) {
  (void)arg;
  Vmdisc_t disc;
  Vmalloc_t* vm = vmopen(vmdcfile(&disc, file_path, 64 << 20), Vmbest, 0);
  CHECK(vm != NULL);
  if (vm == NULL) return;
  char* block = vmpointer(vm, file_block);
  CHECK(block != NULL && vmoffset(vm, block) == file_block);
  if (block == NULL) return;
  CHECK(vmsize(vm, block) >= 100);
  CHECK(vmregion(block) == vm && strcmp(block, "kept across processes") == 0);
  CHECK(vmpointer(vm, 1L << 40) == NULL);
  CHECK(vmclose(vm) == 0);
  errno = 0;
  CHECK(vmopen(&disc, Vmpool, 0) == NULL && errno == EPROTO);
}
static void file_region(void) {
  snprintf(file_path, sizeof file_path, "%s/vm.region", scratch);
  unlink(file_path);
  Vmdisc_t disc;
  Vmalloc_t* vm = vmopen(vmdcfile(&disc, file_path, 64 << 20), Vmbest, 0);
  CHECK(vm != NULL);
  if (vm == NULL) return;
  char* block = vmalloc(vm, 100);
  strcpy(block, "kept across processes");
  file_block = vmoffset(vm, block);
  CHECK(file_block >= 0 && vmpointer(vm, file_block) == block);
  int local;
  CHECK(vmoffset(vm, &local) == -1);
  CHECK(vmclear(vm) == -1 && errno == EPROTO); /* other processes' blocks may be in it */
  CHECK(vmclose(vm) == 0);
  char err[600];
  snprintf(err, sizeof err, "%s/file.err", scratch);
  int rc = in_child(reopen_file, NULL, err);
  CHECK(rc == 0);
  if (rc != 0) fprintf(stderr, "%s", slurp(err));
  unlink(file_path);
}

/* Threads of one region, each freeing what another allocated too. */
static Vmalloc_t* shared_vm;
static void* worker(void* arg) {
  void* mine[64];
  for (int round = 0; round < 2000; ++round) {
    for (int i = 0; i < 64; ++i) {
      mine[i] = vmalloc(shared_vm, 48);
      if (mine[i] == NULL) return (void*)1;
      memset(mine[i], (int)(intptr_t)arg, 48);
    }
    for (int i = 0; i < 64; ++i) {
      if (((char*)mine[i])[47] != (char)(intptr_t)arg) return (void*)2;
      if (vmfree(shared_vm, mine[i]) != 0) return (void*)3;
    }
  }
  return NULL;
}
static void threads(Vmethod_t* meth) {
  shared_vm = vmopen(Vmdcheap, meth, 0);
  CHECK(shared_vm != NULL);
  pthread_t t[4];
  for (int i = 0; i < 4; ++i) pthread_create(&t[i], NULL, worker, (void*)(intptr_t)(i + 1));
  for (int i = 0; i < 4; ++i) {
    void* r;
    pthread_join(t[i], &r);
    CHECK(r == NULL);
  }
  Vmstat_t st;
  CHECK(vmstat(shared_vm, &st) == 0);
  if (meth == Vmbest) CHECK(st.n_busy == 0);
  vmclose(shared_vm);
}

int main(int argc, char** argv) {
  const char* dir = argc > 1 ? argv[1] : getenv("TMPDIR");
  snprintf(scratch, sizeof scratch, "%s/vmalloc-test-XXXXXX", dir != NULL ? dir : "/tmp");
  if (mkdtemp(scratch) == NULL) {
    perror("mkdtemp");
    return 2;
  }
  figure1_last();
  pool();
  best();
  refused();
  change_discipline();
  locality();
  bad_addresses();
  figure8_reports();
  figure10_profile();
  figure8_named_region();
  profile_named_region();
  trace();
  file_region();
  threads(Vmbest);
  threads(Vmpool);
  threads(Vmdebug);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", scratch);
  if (failures != 0) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("vmalloc: every check passed\n");
  return 0;
}
