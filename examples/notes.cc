// notes: a list of notes that every process shares through memd, kept in a
// file region so that it outlives them all (and the daemon's restarts).
//
//   notes add "some text"   appends a note (any number of processes at once)
//   notes list              prints every note
//   notes watch             prints notes as other processes add them (Ctrl-C)
//
// The list lives in the region: a lock-free stack of nodes linked by offset
// pointers, whose head is a named root. Adding allocates a node in shared
// memory and publishes it with one compare-and-swap; no message is sent
// anywhere, the other processes see it in their own mapping.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "client/daemon_client.h"

namespace {

struct Note {
  uint64_t next;      // offset of the next (older) note + 1; 0 ends the list
  int32_t pid;        // who wrote it
  uint32_t length;
  char text[];        // length bytes, not NUL-terminated
};

struct NoteList {
  std::atomic<uint64_t> head{0};  // offset of the newest note + 1
  std::atomic<uint64_t> count{0};
};

int usage() {
  std::fprintf(stderr, "usage: notes add TEXT | notes list | notes watch   (memd socket: $MEMD_SOCKET)\n");
  return 2;
}

// Oldest first.
std::vector<const Note*> notes_of(memd::Region& region, const NoteList& list, uint64_t newest) {
  std::vector<const Note*> out;
  for (uint64_t at = newest; at != 0;) {
    const Note* n = static_cast<const Note*>(region.at(at - 1));
    out.push_back(n);
    at = n->next;
  }
  return {out.rbegin(), out.rend()};
}

void print(const Note* n) { std::printf("[pid %d] %.*s\n", n->pid, static_cast<int>(n->length), n->text); }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  std::string cmd = argv[1];
  if ((cmd == "add" && argc != 3) || (cmd != "add" && cmd != "list" && cmd != "watch")) return usage();

  absl::StatusOr<std::unique_ptr<memd::Client>> client = memd::Client::connect();
  if (!client.ok()) {
    std::fprintf(stderr, "notes: %s\n", std::string(client.status().message()).c_str());
    return 1;
  }
  memd::OpenOptions options;
  options.discipline = memd::Discipline::kFile;
  options.max_bytes = size_t{64} << 20;
  absl::StatusOr<std::unique_ptr<memd::Region>> region = (*client)->open("notes", options);
  if (!region.ok()) {
    std::fprintf(stderr, "notes: %s\n", std::string(region.status().message()).c_str());
    return 1;
  }
  memd::Region& r = **region;
  NoteList* list = r.find_or_construct<NoteList>("notes");
  if (list == nullptr) {
    std::fprintf(stderr, "notes: cannot make the list: %s\n", std::strerror(errno));
    return 1;
  }

  if (cmd == "add") {
    size_t len = std::strlen(argv[2]);
    auto* n = static_cast<Note*>(r.alloc(sizeof(Note) + len));
    if (n == nullptr) {
      std::fprintf(stderr, "notes: region full: %s\n", std::strerror(errno));
      return 1;
    }
    n->pid = getpid();
    n->length = static_cast<uint32_t>(len);
    std::memcpy(n->text, argv[2], len);
    uint64_t self = r.offset_of(n) + 1;
    uint64_t head = list->head.load();
    do {
      n->next = head;
    } while (!list->head.compare_exchange_weak(head, self));
    uint64_t count = list->count.fetch_add(1) + 1;
    // Durable now, not only at the daemon's next checkpoint.
    (void)r.persist(n, sizeof(Note) + len);
    (void)r.persist(list, sizeof *list);
    std::printf("added note %lu\n", static_cast<unsigned long>(count));
    return 0;
  }
  if (cmd == "list") {
    for (const Note* n : notes_of(r, *list, list->head.load())) print(n);
    return 0;
  }
  // watch: the list only grows at its head; print what is new.
  uint64_t seen = 0;
  for (;;) {
    uint64_t head = list->head.load();
    if (head != seen) {
      std::vector<const Note*> all = notes_of(r, *list, head);
      size_t start = 0;
      for (size_t i = 0; i < all.size(); ++i) {
        if (r.offset_of(all[i]) + 1 == seen) start = i + 1;
      }
      for (size_t i = start; i < all.size(); ++i) print(all[i]);
      std::fflush(stdout);
      seen = head;
    }
    usleep(100 * 1000);
  }
}
