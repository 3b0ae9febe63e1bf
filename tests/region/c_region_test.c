/* The region C API, compiled as C: create, roots, close and reopen, a child
 * process attaching and freeing the parent's object, and the errno of each
 * kind of bad input. Exits non-zero and says which check failed. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client/memd_region.h"
#include "tests/support/c_chain_lists.h"

static int failures = 0;
#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "c_region_test:%d: %s\n", __LINE__, #cond);     \
      ++failures;                                                     \
    }                                                                 \
  } while (0)

static void* region_alloc(void* r, size_t size) { return memd_region_alloc((memd_region*)r, size); }
static void region_free(void* r, void* p) { memd_region_free((memd_region*)r, p); }

struct list {
  uint64_t head; /* offset of the first node + 1 */
  uint64_t count;
};
struct node {
  uint64_t next;
  int value;
};

/* Objects in /dev/shm named as private regions are. */
static int count_private_shm(void) {
  DIR* dir = opendir("/dev/shm");
  if (dir == NULL) return 0;
  int n = 0;
  for (struct dirent* e; (e = readdir(dir)) != NULL;) n += strncmp(e->d_name, "memd-private-", 13) == 0;
  closedir(dir);
  return n;
}

int main(void) {
  char dir[] = "/tmp/memd-c-region-XXXXXX";
  const char* tmp = getenv("TMPDIR");
  char path[512], sock[512];
  char tmpl[512];
  snprintf(tmpl, sizeof tmpl, "%s/memd-c-region-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  char* d = mkdtemp(tmpl);
  if (d == NULL) d = mkdtemp(dir);
  CHECK(d != NULL);
  if (d == NULL) return 1;
  snprintf(path, sizeof path, "%s/c.region", d);
  snprintf(sock, sizeof sock, "%s/c.sock", d);

  memd_region* r = memd_region_create(path, MEMD_FILE, (size_t)64 << 20);
  CHECK(r != NULL);
  if (r == NULL) return 1;
  int created = 0;
  struct list* l = memd_region_root(r, "list", sizeof *l, &created);
  CHECK(l != NULL && created == 1 && l->head == 0);
  CHECK(memd_region_root(r, "list", sizeof *l, &created) == l && created == 0);
  for (int i = 0; i < 100; ++i) {
    struct node* n = memd_region_alloc(r, sizeof *n);
    CHECK(n != NULL);
    n->value = i;
    n->next = l->head;
    l->head = memd_region_offset(r, n) + 1;
    ++l->count;
  }
  CHECK(memd_region_persist(r, l, sizeof *l) == 0);
  {
    /* A node published failure-atomically at the head of the list. */
    struct node* n = memd_region_reserve(r, sizeof *n);
    CHECK(n != NULL);
    if (n != NULL) {
      n->value = 100;
      n->next = l->head;
      CHECK(memd_region_publish(r, n, &l->head, memd_region_offset(r, n) + 1) == 0);
      CHECK(l->head == memd_region_offset(r, n) + 1);
      ++l->count;
      errno = 0;
      CHECK(memd_region_cancel(r, n) == -1 && errno == EINVAL);
      /* Unlinked again: the list below is the 100 nodes. */
      l->head = n->next;
      --l->count;
      memd_region_free(r, n);
    }
    void* dropped = memd_region_reserve(r, 40);
    CHECK(dropped != NULL && memd_region_cancel(r, dropped) == 0);
  }
  {
    /* Two nodes and the list's count published as one step. */
    uint64_t* words = memd_region_alloc(r, 3 * sizeof(uint64_t));
    struct node* a = memd_region_reserve(r, sizeof *a);
    struct node* b = memd_region_reserve(r, sizeof *b);
    CHECK(words != NULL && a != NULL && b != NULL);
    if (words != NULL && a != NULL && b != NULL) {
      memset(words, 0, 3 * sizeof(uint64_t));
      a->value = 1;
      b->value = 2;
      memd_publish_item items[2] = {{a, &words[0], memd_region_offset(r, a) + 1},
                                    {b, &words[1], memd_region_offset(r, b) + 1}};
      memd_publish_item repeated[2] = {items[0], {b, &words[0], 7}};
      errno = 0;
      CHECK(memd_region_publish_batch(r, repeated, 2) == -1 && errno == EINVAL && words[0] == 0);
      CHECK(memd_region_publish_batch(r, items, 2) == 0);
      CHECK(words[0] == memd_region_offset(r, a) + 1 && words[1] == memd_region_offset(r, b) + 1);
      memd_region_free(r, a);
      memd_region_free(r, b);
      memd_region_free(r, words);
    }
  }
  {
    /* calloc: zeros where a freed object left bytes, and overflow refused. */
    unsigned char* dirty = memd_region_alloc(r, 256);
    CHECK(dirty != NULL);
    if (dirty != NULL) memset(dirty, 0xab, 256);
    memd_region_free(r, dirty);
    unsigned char* z = memd_region_calloc(r, 16, 16);
    CHECK(z != NULL);
    int zero = 1;
    for (int i = 0; z != NULL && i < 256; ++i) zero &= z[i] == 0;
    CHECK(zero);
    memd_region_free(r, z);
    errno = 0;
    CHECK(memd_region_calloc(r, SIZE_MAX / 2, 4) == NULL && errno == ENOMEM);
  }
  CHECK(memd_region_serve(r, sock) == 0);

  /* A child frees every other node, the parent's objects. */
  pid_t pid = fork();
  if (pid == 0) {
    memd_region* c = memd_region_attach(path, MEMD_FILE, sock, 0);
    if (c == NULL) _exit(10);
    struct list* cl = memd_region_find(c, "list");
    if (cl == NULL) _exit(11);
    uint64_t* link = &cl->head;
    int k = 0;
    while (*link) {
      struct node* n = memd_region_at(c, *link - 1);
      if (k++ % 2 == 0) {
        *link = n->next;
        memd_region_free(c, n);
        --cl->count;
      } else {
        link = &n->next;
      }
    }
    memd_region_close(c);
    _exit(0);
  }
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  char msg[256];
  CHECK(memd_region_check(r, msg, sizeof msg) == 0);
  memd_region_close(r);

  /* Reopened: the list is as the child left it. */
  r = memd_region_open(path, MEMD_FILE);
  CHECK(r != NULL);
  if (r == NULL) return 1;
  l = memd_region_find(r, "list");
  CHECK(l != NULL && l->count == 50);
  int seen = 0;
  for (uint64_t off = l->head; off; ++seen) {
    struct node* n = memd_region_at(r, off - 1);
    CHECK(n->value % 2 == 0);
    off = n->next;
  }
  CHECK(seen == 50);
  CHECK(memd_region_check(r, msg, sizeof msg) == 0);

  /* Bad input. */
  errno = 0;
  CHECK(memd_region_create(path, MEMD_FILE, (size_t)64 << 20) == NULL && errno == EEXIST);
  CHECK(memd_region_open(path, MEMD_FILE) == NULL && errno == EBUSY); /* it has an owner: us */
  snprintf(msg, sizeof msg, "%s/missing", d);
  CHECK(memd_region_open(msg, MEMD_FILE) == NULL && errno == ENOENT);
  CHECK(memd_region_create("a/b", MEMD_SHM, 0) == NULL && errno == EINVAL);
  CHECK(memd_region_create("x", 42, 0) == NULL && errno == EINVAL);
  snprintf(msg, sizeof msg, "%s/nobody.sock", d);
  CHECK(memd_region_attach(path, MEMD_FILE, msg, 0) == NULL && errno == ECONNREFUSED);
  CHECK(memd_region_find(r, "nothing") == NULL && errno == ENOENT);
  memd_region_close(r);

  /* Not a region: too short to be one, then long enough but something else. */
  FILE* f = fopen(msg, "w");
  fputs("plain text", f);
  fclose(f);
  CHECK(memd_region_open(msg, MEMD_FILE) == NULL && errno == EBADMSG);
  CHECK(truncate(msg, 1 << 20) == 0);
  CHECK(memd_region_open(msg, MEMD_FILE) == NULL && errno == EINVAL);

  CHECK(memd_region_remove(path, MEMD_FILE) == 0);
  CHECK(memd_region_remove(path, MEMD_FILE) == -1 && errno == ENOENT);
  unlink(msg);

  /* The debug and profile methods: an overwrite found by a check, the
   * summary counting this file's calls (sites as return addresses). */
  snprintf(path, sizeof path, "%s/debugged", d);
  memd_region* dbg = memd_region_create_method(path, MEMD_FILE, MEMD_DEBUG, 16 << 20);
  CHECK(dbg != NULL);
  if (dbg != NULL) {
    CHECK(memd_region_method(dbg) == MEMD_DEBUG);
    char* a = memd_region_alloc(dbg, 12);
    char* b = memd_region_alloc(dbg, 100);
    CHECK(a != NULL && b != NULL && memd_region_size(dbg, a) == 12);
    CHECK(memd_region_watch(dbg, b) == 0);
    CHECK(memd_region_debug_flags(dbg, MEMD_DEBUG_ABORT | MEMD_DEBUG_CHECK) == 0);
    CHECK(memd_region_debug_flags(dbg, 0) == 0);
    CHECK(memd_region_debug_flags(dbg, 64) == -1 && errno == EINVAL);
    CHECK(memd_region_check_objects(dbg) == 0);
    a[12] = 'x';
    CHECK(memd_region_check_objects(dbg) == 1);
    memd_region_free(dbg, a);
    memd_region_free(dbg, b);
    snprintf(msg, sizeof msg, "%s/summary", d);
    FILE* out = fopen(msg, "w+");
    CHECK(out != NULL && memd_region_write_profile(dbg, fileno(out)) == 0);
    char text[4096] = "";
    if (out != NULL) {
      rewind(out);
      text[fread(text, 1, sizeof text - 1, out)] = '\0';
      fclose(out);
    }
    CHECK(strstr(text, "ALLOCATION USAGE SUMMARY:n_alloc=2:n_free=2:s_alloc=112:s_free=112:") == text);
    CHECK(strstr(text, "file=<>:n_alloc=2:n_free=2:") != NULL);
    CHECK(strstr(text, "    pc=") != NULL && strstr(text, "region_c_api_test+0x") != NULL);
    if (failures != 0) fprintf(stderr, "summary:\n%s", text);
    unlink(msg);
    memd_region_close(dbg);
    CHECK(memd_region_remove(path, MEMD_FILE) == 0);
  }
  memd_region* plain = memd_region_create(path, MEMD_FILE, 16 << 20);
  CHECK(plain != NULL);
  if (plain != NULL) {
    CHECK(memd_region_check_objects(plain) == -1 && errno == EINVAL);
    CHECK(memd_region_watch(plain, plain) == -1 && errno == EINVAL);
    CHECK(memd_region_debug_flags(plain, 0) == -1 && errno == EINVAL);
    CHECK(memd_region_write_profile(plain, 2) == -1 && errno == EPROTO);
    memd_region_close(plain);
    CHECK(memd_region_remove(path, MEMD_FILE) == 0);
  }
  /* Private regions: each method over memory no other process reaches,
   * nothing left in /dev/shm. */
  int shm_before = count_private_shm();
  for (int m = MEMD_BEST; m <= MEMD_PROFILE; ++m) {
    memd_region* own = memd_region_create_private(m, 8 << 20);
    CHECK(own != NULL);
    if (own == NULL) continue;
    CHECK(memd_region_method(own) == m);
    void* batch[100] = {0};
    if (m != MEMD_LAST) {
      CHECK(memd_region_alloc_batch(own, 100, 40, batch) == 100);
      CHECK(batch[0] != NULL && batch[99] != NULL && batch[0] != batch[99]);
      memd_region_free_batch(own, batch, 100);
    }
    char* p = memd_region_alloc(own, 40);
    CHECK(p != NULL && memd_region_size(own, p) >= 40);
    memset(p, 'p', 40);
    if (m == MEMD_LAST || m == MEMD_POOL) {
      CHECK(memd_region_clear(own) == 0);
    } else {
      memd_region_free(own, p);
    }
    if (m == MEMD_DEBUG) {
      char* q = memd_region_alloc(own, 8);
      CHECK(q != NULL);
      if (q != NULL) q[8] = 'x';
      CHECK(memd_region_check_objects(own) == 1);
    }
    /* Call-chain pools: the best method's alone. */
    CHECK(memd_region_set_chain_pools(own, 2) == -1 && errno == EINVAL);
    if (m == MEMD_BEST) {
      CHECK(memd_region_set_chain_pools(own, 1) == 0);
      CHECK(chain_lists_adjacency(region_alloc, region_free, own, 4000) >= 0.9);
      CHECK(memd_region_set_chain_pools(own, 0) == 0);
      double off = chain_lists_adjacency(region_alloc, region_free, own, 4000);
      CHECK(off >= 0 && off <= 0.1);
    } else {
      CHECK(memd_region_set_chain_pools(own, 1) == -1 && errno == ENOTSUP);
    }
    memd_region_close(own);
  }
  CHECK(count_private_shm() == shm_before);
  CHECK(memd_region_create_private(99, 8 << 20) == NULL && errno == EINVAL);
  rmdir(d);
  if (failures == 0) printf("c_region_test: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
