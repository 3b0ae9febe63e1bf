/* A counter and a list that outlive the process: connects to the memd
 * daemon ($MEMD_SOCKET or the default), opens the region NAME (creating
 * it, shared memory), bumps the root "count", appends a note to the list
 * under the root "notes" and prints both.
 *
 *   hello_c NAME      ->   count=1 notes=1   (then 2 2, ...)
 */
#include <errno.h>
#include <memd/memd_client.h>
#include <stdio.h>
#include <string.h>

struct note {
  uint64_t next; /* offset + 1 of the next note in the region, 0: none */
  char text[48];
};

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s REGION\n", argv[0]);
    return 2;
  }
  memd_client* client = memd_connect(NULL);
  if (client == NULL) {
    fprintf(stderr, "memd_connect: %s\n", strerror(errno));
    return 1;
  }
  memd_region* region = memd_open(client, argv[1], NULL);
  if (region == NULL) {
    fprintf(stderr, "memd_open %s: %s\n", argv[1], strerror(errno));
    return 1;
  }
  int created = 0;
  uint64_t* count = memd_region_root(region, "count", sizeof(uint64_t), &created);
  uint64_t* head = memd_region_root(region, "notes", sizeof(uint64_t), &created);
  struct note* n = memd_region_alloc(region, sizeof(struct note));
  if (count == NULL || head == NULL || n == NULL) {
    fprintf(stderr, "memd_region: %s\n", strerror(errno));
    return 1;
  }
  /* Pointers differ between processes: links are offsets in the region
   * (plus one: an object may sit at offset 0, and a new root reads 0). */
  snprintf(n->text, sizeof(n->text), "run %llu", (unsigned long long)(*count + 1));
  n->next = *head;
  *head = memd_region_offset(region, n) + 1;
  *count += 1;
  unsigned notes = 0;
  for (uint64_t at = *head; at != 0; at = ((struct note*)memd_region_at(region, at - 1))->next) ++notes;
  printf("count=%llu notes=%u version=%s\n", (unsigned long long)*count, notes, memd_version());
  memd_region_close(region);
  memd_disconnect(client);
  return 0;
}
