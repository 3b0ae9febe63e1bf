// The C API over memd::Heap: a memd_heap* is a memd::Heap*.
#include <cerrno>
#include <cstring>

#include "client/heap.h"
#include "client/memd.h"
#include "client/status_errno.h"

namespace {
memd::Heap* cast(memd_heap* h) { return reinterpret_cast<memd::Heap*>(h); }
memd_heap* cast(memd::Heap* h) { return reinterpret_cast<memd_heap*>(h); }
}  // namespace

extern "C" {

memd_heap* memd_heap_open(const memd_heap_options* options) {
  memd::HeapOptions o;
  if (options != nullptr) {
    if (options->reserve_bytes) o.reserve_bytes = options->reserve_bytes;
    if (options->max_threads) o.max_threads = options->max_threads;
  }
  auto heap = memd::Heap::create(o);
  if (!heap.ok()) {
    errno = heap.status().code() == absl::StatusCode::kInvalidArgument ? EINVAL : ENOMEM;
    return nullptr;
  }
  return cast(heap->release());
}

void memd_heap_close(memd_heap* heap) {
  if (heap != nullptr && cast(heap) != &memd::Heap::process()) delete cast(heap);
}

memd_heap* memd_process_heap(void) { return cast(&memd::Heap::process()); }

// The program's call site, not this entry point, starts a call chain (the
// pools' classifier; in a build without tail calls this frame would be one
// site for every caller).
void* memd_alloc(memd_heap* heap, size_t size) {
  return cast(heap)->alloc_as(size, __builtin_return_address(0), __builtin_dwarf_cfa());
}

void* memd_calloc(memd_heap* heap, size_t count, size_t size) {
  size_t total;
  return memd::client::bytes_of(count, size, &total) ? cast(heap)->alloc_zeroed(total) : nullptr;
}

void* memd_alloc_aligned(memd_heap* heap, size_t align, size_t size) {
  return cast(heap)->alloc_aligned(size, align);
}

void memd_free(memd_heap* heap, void* p) { cast(heap)->free(p); }

size_t memd_alloc_batch(memd_heap* heap, size_t n, size_t size, void** out) {
  return cast(heap)->alloc_batch(n, size, out);
}

void memd_free_batch(memd_heap* heap, void* const* p, size_t n) { cast(heap)->free_batch(p, n); }

void* memd_alloc_near(memd_heap* heap, size_t size, const void* hint, size_t near_bytes) {
  return cast(heap)->alloc_near(size, hint, near_bytes);
}

int memd_heap_set_chain_pools(memd_heap* heap, int on) {
  if (on != 0 && on != 1) {
    errno = EINVAL;
    return -1;
  }
  cast(heap)->set_chain_pools(on != 0);
  return 0;
}

void* memd_resize(memd_heap* heap, void* p, size_t size, unsigned flags) {
  return cast(heap)->resize(p, size, flags);
}

int memd_clear(memd_heap* heap) {
  cast(heap)->clear();
  return 0;
}

int memd_compact(memd_heap* heap) {
  cast(heap)->compact();
  return 0;
}

int memd_stat(memd_heap* heap, memd_stats* out) {
  if (out == nullptr) {
    errno = EINVAL;
    return -1;
  }
  memd::HeapStats s = cast(heap)->stat();
  out->busy_objects = s.busy_objects;
  out->busy_bytes = s.busy_bytes;
  out->free_objects = s.free_objects;
  out->free_bytes = s.free_bytes;
  out->pages_in_use = s.pages_in_use;
  out->pages_dirty = s.pages_dirty;
  out->pages_discarded = s.pages_discarded;
  out->pages_committed = s.pages_committed;
  return 0;
}

void* memd_addr(memd_heap* heap, const void* p) { return cast(heap)->addr(p); }

size_t memd_size(memd_heap* heap, const void* p) {
  size_t n = cast(heap)->size(p);
  if (n == 0) errno = EINVAL;
  return n;
}

int memd_check(memd_heap* heap, char* message, size_t message_size) {
  absl::Status s = cast(heap)->check();
  if (s.ok()) {
    if (message_size > 0) message[0] = '\0';
    return 0;
  }
  if (message_size > 0) {
    std::strncpy(message, std::string(s.message()).c_str(), message_size - 1);
    message[message_size - 1] = '\0';
  }
  errno = EIO;
  return -1;
}

}  // extern "C"
