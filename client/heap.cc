#include "client/heap.h"

#include <cerrno>
#include <cstring>
#include <new>

#include "region/chain_merge.h"
#include "region/chain_pools.h"
#include "region/diag.h"
#include "client/process_heap.h"
#include "heap/heap_counters.h"
#include "heap/inspect.h"
#include "region/thread_heaps.h"

namespace memd {

absl::StatusOr<std::unique_ptr<Heap>> Heap::create(const HeapOptions& options) {
  region::ArenaOptions arena_options;
  arena_options.reserve_bytes = options.reserve_bytes;
  arena_options.max_threads = options.max_threads;
  arena_options.params = options.params;
  region::Arena* arena = region::Arena::create(arena_options);
  if (arena == nullptr) {
    int e = errno;
    if (e == EINVAL) return absl::InvalidArgumentError("invalid heap options (size boundaries or thread count)");
    return absl::ResourceExhaustedError(std::string("cannot reserve the heap: ") + std::strerror(e));
  }
  region::ArenaHandle handle;
  if (!region::register_arena(arena, &handle)) {
    region::Arena::destroy(arena);
    return absl::ResourceExhaustedError("too many heaps in this process");
  }
  return std::unique_ptr<Heap>(new Heap(handle, true));
}

Heap& Heap::process() {
  static Heap* heap = new Heap(client::process_arena(), false);
  return *heap;
}

Heap::~Heap() {
  if (!owned_) return;
  region::unregister_arena(handle_);
  region::Arena::destroy(handle_.arena);
}

bool Heap::contains(const void* p) const { return handle_.arena->contains(p); }

void* Heap::alloc(size_t size) noexcept {
  if (__builtin_expect(chain_pools_, 0)) return alloc_by_chain(size);
  heap::ThreadHeap* h = region::thread_heap(handle_);
  return h ? h->alloc(size) : nullptr;
}

void Heap::set_chain_pools(bool on) noexcept {
  if (on && !region::chain_pools_enabled()) region::chain_pools_enable(region::ChainPoolOptions{});
  chain_pools_ = on;
}

void* Heap::alloc_by_chain(size_t size) noexcept {
  return alloc_as(size, __builtin_return_address(0), __builtin_dwarf_cfa());
}

void* Heap::alloc_as(size_t size, const void* caller, const void* caller_cfa) noexcept {
  heap::ThreadHeap* h = region::thread_heap(handle_);
  if (h == nullptr) return nullptr;
  uint32_t group = chain_pools_ ? region::chain_pool_for(caller, caller_cfa, size) : 0;
  if (group == 0) return h->alloc(size);
  void* p = h->alloc_grouped(size, group);
  region::chain_merge_allocated(h, group, p);
  return p;
}

void* Heap::alloc_aligned(size_t size, size_t align) noexcept {
  if (align == 0 || (align & (align - 1)) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  heap::ThreadHeap* h = region::thread_heap(handle_);
  return h ? h->alloc_aligned(size, align) : nullptr;
}

void* Heap::alloc_zeroed(size_t size) noexcept {
  heap::ThreadHeap* h = region::thread_heap(handle_);
  return h ? h->alloc_zeroed(size) : nullptr;
}

size_t Heap::alloc_batch(size_t n, size_t size, void** out) noexcept {
  if (n == 0) return 0;
  if (out == nullptr) {
    errno = EINVAL;
    return 0;
  }
  heap::ThreadHeap* h = region::thread_heap(handle_);
  return h ? h->alloc_batch(n, size, out) : 0;
}

void* Heap::alloc_near(size_t size, const void* hint, size_t near_bytes) noexcept {
  heap::ThreadHeap* h = region::thread_heap(handle_);
  return h ? h->alloc_near(size, hint, near_bytes) : nullptr;
}

// free's checks and reports, for a thread heap already looked up.
static void free_with(const Heap& heap, heap::ThreadHeap* h, void* p, const char* call, const void* caller) {
  if (!heap.contains(p)) {
    region::report_heap_error(region::HeapError::kInvalidPointer, call, p, caller);
    return;
  }
  heap::FreeStatus s = h->free(p);
  if (s != heap::FreeStatus::kOk) {
    region::report_heap_error(s == heap::FreeStatus::kDoubleFree ? region::HeapError::kDoubleFree
                                                                 : region::HeapError::kInvalidPointer,
                              call, p, caller);
  }
}

void Heap::free(void* p) noexcept {
  if (p == nullptr) return;
  free_with(*this, region::thread_heap_or_stranger(handle_), p, "memd::Heap::free", __builtin_return_address(0));
}

void Heap::free_batch(void* const* p, size_t n) noexcept {
  if (p == nullptr || n == 0) return;
  heap::ThreadHeap* h = region::thread_heap_or_stranger(handle_);
  // The frees of another thread's block go to it as one chain; never in the
  // stranger, which threads share.
  heap::ThreadHeap::GatherRemoteFrees gather(h == handle_.arena->stranger() ? nullptr : h);
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != nullptr) free_with(*this, h, p[i], "memd::Heap::free_batch", __builtin_return_address(0));
  }
}

void* Heap::resize(void* p, size_t size, unsigned flags) noexcept {
  if (p == nullptr) return (flags & kResizeClear) ? alloc_zeroed(size) : alloc(size);
  if (size == 0) {
    free(p);
    return nullptr;
  }
  heap::ThreadHeap* h = region::thread_heap(handle_);
  if (h == nullptr) return nullptr;
  if (!contains(p) || h->validate(p) != heap::FreeStatus::kOk) {
    region::report_heap_error(region::HeapError::kInvalidPointer, "memd::Heap::resize", p,
                              __builtin_return_address(0));
    errno = EINVAL;
    return nullptr;
  }
  size_t old_size = h->usable_size(p);
  void* q = p;
  if (!h->resize_in_place(p, size)) {
    if (!(flags & kResizeMove)) {
      errno = ENOMEM;
      return nullptr;
    }
    q = h->alloc(size);
    if (q == nullptr) return nullptr;
    if (flags & kResizeCopy) h->move_or_copy(q, p, std::min(old_size, size));
    h->free(p);
  }
  if ((flags & kResizeClear) && size > old_size) {
    std::memset(static_cast<char*>(q) + old_size, 0, size - old_size);
  }
  return q;
}

void Heap::clear() { handle_.arena->clear(); }

void Heap::compact() {
  if (heap::ThreadHeap* h = region::thread_heap(handle_)) h->release_empty();
  handle_.arena->sweep_abandoned();
  handle_.arena->purge_all();
}

// The calling thread's gathered remote frees go out first, so that what it
// freed shows as free (another thread's wait for its next slow path or exit).
void Heap::flush_own_remote_frees() {
  if (heap::ThreadHeap* h = region::thread_heap_if_attached(handle_)) h->flush_remote_frees();
}

HeapStats Heap::stat() {
  flush_own_remote_frees();
  return handle_.arena->stat();
}

heap::CounterSnapshot Heap::counters() const {
  heap::CounterSnapshot c;
  handle_.arena->sum_counters(&c);
  return c;
}

absl::Status Heap::check() {
  flush_own_remote_frees();
  char message[256];
  if (handle_.arena->check(message, sizeof message)) return absl::OkStatus();
  return absl::InternalError(message);
}

void* Heap::addr(const void* p) const {
  return heap::region_object_start(handle_.arena->region(), handle_.arena->classes(), p);
}

size_t Heap::size(const void* p) const {
  // The checks free() makes (object start, free tag, chunk state): safe while
  // other threads allocate and free around p, unlike a walk of free lists.
  if (!contains(p)) return 0;
  heap::ThreadHeap* h = region::thread_heap_or_stranger(handle_);
  return h->validate(p) == heap::FreeStatus::kOk ? h->usable_size(const_cast<void*>(p)) : 0;
}

}  // namespace memd
