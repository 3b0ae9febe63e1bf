#include "client/process_heap.h"

#include <pthread.h>

#include <atomic>

#include "region/diag.h"
#include "region/options.h"

namespace memd::client {
namespace {

constinit region::ArenaHandle process_handle{};
constinit std::atomic<bool> created{false};
constinit bool failed = false;  // under create_lock: no second try
constinit pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;

void fork_prepare() {
  if (created.load(std::memory_order_acquire)) process_handle.arena->lock();
}
void fork_parent() {
  if (created.load(std::memory_order_acquire)) process_handle.arena->unlock();
}
void fork_child() {
  if (created.load(std::memory_order_acquire)) process_handle.arena->reinit_lock_in_child();
}

// Below this, a process heap is not worth having.
constexpr size_t kMinProcessReserve = size_t{256} << 20;

}  // namespace

const region::ArenaHandle& process_arena() {
  if (__builtin_expect(created.load(std::memory_order_acquire), 1)) return process_handle;
  pthread_mutex_lock(&create_lock);
  if (!created.load(std::memory_order_relaxed) && !failed) {
    region::ArenaOptions options = region::process_arena_options();
    region::Arena* arena = region::Arena::create(options);
    // Address space may be limited (ulimit -v, a container, valgrind): a
    // smaller heap beats none. Halve down to kMinProcessReserve.
    while (arena == nullptr && options.reserve_bytes / 2 >= kMinProcessReserve) {
      options.reserve_bytes /= 2;
      arena = region::Arena::create(options);
      if (arena != nullptr) region::report_reserve_reduced(options.reserve_bytes);
    }
    region::ArenaHandle handle;
    failed = arena == nullptr;
    if (arena != nullptr && region::register_arena(arena, &handle, /*process=*/true)) {
      process_handle = handle;
      created.store(true, std::memory_order_release);
      // Threads in the child other than the forking one are gone; holding the
      // lock across fork() keeps the page heap consistent for the child.
      pthread_atfork(fork_prepare, fork_parent, fork_child);
    }
  }
  pthread_mutex_unlock(&create_lock);
  return process_handle;
}

const region::ArenaHandle* process_arena_if_created() {
  return created.load(std::memory_order_acquire) ? &process_handle : nullptr;
}

}  // namespace memd::client
