#include "region/thread_heaps.h"

#include <pthread.h>
#include <sys/mman.h>

#include <atomic>
#include <cerrno>

namespace memd::region {

__thread ThreadHeapEntry tl_process_heap __attribute__((tls_model("initial-exec")));
__thread ThreadHeapTable* tl_region_heaps __attribute__((tls_model("initial-exec")));
__thread LastRegionHeap tl_last_region_heap __attribute__((tls_model("initial-exec"))) = {kNoRegionHeap, nullptr};

namespace {

struct Registry {
  pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  ThreadHeapHost* hosts[kMaxArenas] = {};
  std::atomic<uint32_t> generation[kMaxArenas] = {};
  uint32_t next_generation = 1;
  pthread_key_t exit_key = 0;
  pthread_once_t key_once = PTHREAD_ONCE_INIT;
};

// Constant-initialized, so it is usable before any constructor runs (the
// malloc shim is called from the loader and from other libraries' constructors).
constinit Registry registry;

// The last region heap forgets `generation` (its entry is being cleared).
void forget_region_heap(uint32_t generation) {
  if (tl_last_region_heap.generation == generation) tl_last_region_heap = {kNoRegionHeap, nullptr};
}

void detach_entry(uint32_t id, ThreadHeapEntry& e) {
  if (e.heap == nullptr) return;
  forget_region_heap(e.generation);
  heap::ThreadHeap* h = e.heap;
  bool live = registry.generation[id].load(std::memory_order_acquire) == e.generation;
  e.generation = 0;
  e.heap = nullptr;
  if (live) registry.hosts[id]->detach_thread(h);
}

void detach_all_at_exit(void*) {
  detach_entry(kProcessArenaId, tl_process_heap);
  ThreadHeapTable* table = tl_region_heaps;
  if (table == nullptr) return;
  for (uint32_t id = 1; id < kMaxArenas; ++id) detach_entry(id, table->entries[id]);
  // A free after this (another key's destructor) finds no entry and goes
  // to the arena's stranger; an allocation maps a table again.
  tl_region_heaps = nullptr;
  tl_last_region_heap = {kNoRegionHeap, nullptr};
  munmap(table, sizeof(ThreadHeapTable));
}

// This thread's table of region arenas, mapped on first use: not malloc,
// which may be the caller (the shim's daemon mode allocates from a region).
ThreadHeapTable* region_table() {
  if (tl_region_heaps != nullptr) return tl_region_heaps;
  void* p = mmap(nullptr, sizeof(ThreadHeapTable), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    errno = ENOMEM;
    return nullptr;
  }
  tl_region_heaps = static_cast<ThreadHeapTable*>(p);  // zeroed: no entry is current
  return tl_region_heaps;
}

void create_exit_key() { pthread_key_create(&registry.exit_key, detach_all_at_exit); }

}  // namespace

namespace {

bool register_any(ThreadHeapHost* host, Arena* arena, ArenaHandle* out, bool process) {
  pthread_once(&registry.key_once, create_exit_key);
  pthread_mutex_lock(&registry.lock);
  for (uint32_t id = process ? kProcessArenaId : 1; id < (process ? 1 : kMaxArenas); ++id) {
    if (registry.hosts[id] != nullptr) continue;
    registry.hosts[id] = host;
    uint32_t gen = registry.next_generation++;  // never 0 or kNoRegionHeap: 4e9 registrations away
    registry.generation[id].store(gen, std::memory_order_release);
    pthread_mutex_unlock(&registry.lock);
    *out = {host, arena, id, gen};
    return true;
  }
  pthread_mutex_unlock(&registry.lock);
  errno = EMFILE;
  return false;
}

}  // namespace

bool register_arena(Arena* arena, ArenaHandle* out, bool process) {
  return register_any(arena, arena, out, process);
}

bool register_host(ThreadHeapHost* host, ArenaHandle* out) { return register_any(host, nullptr, out, false); }

void unregister_arena(const ArenaHandle& handle) {
  pthread_mutex_lock(&registry.lock);
  registry.generation[handle.id].store(0, std::memory_order_release);
  registry.hosts[handle.id] = nullptr;
  pthread_mutex_unlock(&registry.lock);
  ThreadHeapEntry* e = thread_heap_entry(handle.id);
  if (e != nullptr && e->generation == handle.generation) *e = {0, nullptr};
  forget_region_heap(handle.generation);
}

heap::ThreadHeap* attach_thread_heap(const ArenaHandle& handle) {
  ThreadHeapEntry* e = handle.id == kProcessArenaId ? &tl_process_heap : nullptr;
  if (e == nullptr) {
    ThreadHeapTable* table = region_table();
    if (table == nullptr) return nullptr;
    e = &table->entries[handle.id];
  }
  heap::ThreadHeap* h = handle.host->attach_thread();
  if (h == nullptr) return nullptr;
  *e = {handle.generation, h};
  // Any non-null value makes the key's destructor run at thread exit.
  pthread_setspecific(registry.exit_key, e);
  return h;
}

void detach_thread_heap(const ArenaHandle& handle) {
  ThreadHeapEntry* e = thread_heap_entry(handle.id);
  if (e == nullptr || e->generation != handle.generation || e->heap == nullptr) return;
  heap::ThreadHeap* h = e->heap;
  *e = {0, nullptr};
  forget_region_heap(handle.generation);
  handle.host->detach_thread(h);
}

}  // namespace memd::region
