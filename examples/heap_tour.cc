// A tour of the memd heap in one process: what `make run` shows until the
// daemon exists. Allocates across size classes and threads, frees across
// threads, prints the heap's statistics and checks its invariants.
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "client/allocators.h"
#include "client/heap.h"

int main() {
  auto created = memd::Heap::create();
  if (!created.ok()) {
    std::fprintf(stderr, "heap_tour: %s\n", std::string(created.status().message()).c_str());
    return 1;
  }
  memd::Heap& heap = **created;

  // Objects of every kind: small, medium, large (headers, best fit), huge.
  std::vector<void*> objects;
  for (size_t size : {8ul, 24ul, 120ul, 128ul, 496ul, 504ul, 4000ul, 32768ul, 100000ul, 4ul << 20}) {
    void* p = heap.alloc(size);
    std::memset(p, 0xab, size);
    std::printf("alloc %8zu bytes -> usable %8zu\n", size, heap.size(p));
    objects.push_back(p);
  }

  // Two threads allocate; the main thread frees what they made (remote frees).
  std::vector<void*> made[2];
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100000; ++i) made[t].push_back(heap.alloc(16 + i % 200));
    });
  }
  for (auto& th : threads) th.join();

  // An STL container in the heap.
  std::vector<int, memd::Allocator<int>> numbers{memd::Allocator<int>(heap)};
  for (int i = 0; i < 1000; ++i) numbers.push_back(i);

  memd::HeapStats s = heap.stat();
  std::printf("\nlive: %zu objects, %zu bytes; free in blocks: %zu bytes\n", s.busy_objects,
              s.busy_bytes, s.free_bytes);
  for (auto& v : made) for (void* p : v) heap.free(p);
  for (void* p : objects) heap.free(p);
  heap.compact();
  s = heap.stat();
  std::printf("after freeing: live %zu objects; pages in use %zu, empty %zu, discarded %zu\n",
              s.busy_objects, s.pages_in_use, s.pages_dirty, s.pages_discarded);
  absl::Status ok = heap.check();
  std::printf("check: %s\n", ok.ok() ? "every invariant holds" : std::string(ok.message()).c_str());
  return ok.ok() ? 0 : 1;
}
