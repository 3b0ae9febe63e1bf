#include "region/arena.h"

#include <sys/mman.h>

#include <cerrno>
#include <new>

#include "heap/region_format.h"

namespace memd::region {

Arena* Arena::create(const ArenaOptions& options) {
  if (!heap::params_valid(options.params) || options.max_threads == 0 ||
      options.max_threads > heap::kMaxOwnerSlots) {
    errno = EINVAL;
    return nullptr;
  }
  // Not from malloc: the malloc shim creates the process arena.
  void* mem = mmap(nullptr, sizeof(Arena), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return nullptr;
  auto* arena = new (mem) Arena();
  if (!arena->init(options)) {
    int saved = errno;
    destroy(arena);
    errno = saved;
    return nullptr;
  }
  return arena;
}

void Arena::destroy(Arena* arena) {
  arena->~Arena();
  munmap(arena, sizeof(Arena));
}

bool Arena::init(const ArenaOptions& options) {
  if (!source_.reserve(options.reserve_bytes)) return false;
  if (!heap::region_format(source_, options.params, options.max_threads, heap::random_secret())) return false;
  // Huge pages where the kernel leaves the choice to the program
  // (transparent_hugepage "madvise"): faults and TLB misses by 2 MiB, at
  // the price of resident memory in 2 MiB steps. Refused: small pages.
  if (options.huge_pages) (void)source_.advise_huge_pages();
  pages_.init(&source_, heap::Region::attach(source_.base()));
  heap::BlockSource* blocks = prefault_.wrap(options.prefault, &pages_, pages_.region(), &pages_.classes());
  threads_.set_kept_heaps(options.kept_heaps);
  threads_.set_gather_remote_frees(true);  // anonymous memory: no other process sees it
  return threads_.init(pages_.region(), &pages_.classes(), blocks, heap::kProcessHolder);
}

void Arena::clear() {
  threads_.for_each_attached([](heap::ThreadHeap& h) { h.reset(); });
  pages_.free_everything();
}

}  // namespace memd::region
