// memd::Region's pool and last methods (Vmalloc's Vmpool and Vmlast): the
// data-plane calls of a region whose method is not best, its clear and its
// statistics (debug and profile go on to region_debug.cc). The algorithms are heap/pool_method and heap/last_method; their
// state is a reserved root ("memd:pool", "memd:last") that the first process
// to allocate makes, so it lives and persists with the region.
#include <cerrno>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "heap/last_method.h"
#include "heap/pool_method.h"
#include "heap/remote_free.h"
#include "heap/site_table.h"
#include "region/diag.h"
#include "region/region.h"
#include "region/region_impl.h"

namespace memd {
namespace {

bool books_in_site_table(Method m) { return m == Method::kDebug || m == Method::kProfile; }
const char* state_root_name(Method m) {
  return m == Method::kPool ? "memd:pool" : m == Method::kLast ? "memd:last" : "memd:sites";
}
const char* state_type_name(Method m) {
  return m == Method::kPool   ? "memd::heap::PoolState"
         : m == Method::kLast ? "memd::heap::LastState"
                              : "memd::heap::SiteTable";
}

// A pool region's cache records, one per owner slot (heap/pool_method.h).
constexpr const char* kPoolRecordsRoot = "memd:pool-caches";
constexpr const char* kPoolRecordsType = "memd::heap::PoolCacheRecord[]";

// The records as the root names them: nullptr unless it holds one per slot,
// aligned (the entry is memory clients write).
heap::PoolCacheRecord* pool_records_at(const RegionImpl& impl, void* p, uint64_t bytes) {
  if (p == nullptr || reinterpret_cast<uintptr_t>(p) % alignof(heap::PoolCacheRecord) != 0 ||
      bytes < uint64_t{impl.region.max_owners} * sizeof(heap::PoolCacheRecord)) {
    return nullptr;
  }
  return static_cast<heap::PoolCacheRecord*>(p);
}

// The calling thread's pool cache; nullptr for a thread without a heap of
// its own (the stranger heap is shared by such threads).
heap::PoolCache* pool_cache_of(RegionImpl& impl) {
  if (!impl.registered) return nullptr;
  heap::ThreadHeap* h = region::thread_heap_or_stranger(impl.handle);
  return h == impl.pool.stranger() ? nullptr : &h->pool_cache;
}

}  // namespace

void RegionImpl::MethodChunks::free_chunk(char* chunk) {
  (void)region::thread_heap_or_stranger(impl_->handle)->free(chunk);
}

void* Region::method_state() const {
  if (void* s = impl_->method_state.load(std::memory_order_acquire)) return s;
  Method m = impl_->method;
  std::string_view name = state_root_name(m);
  uint64_t type = type_hash(state_type_name(m));
  void* s = find_root(name, type, true);  // takes no lock
  if (s == nullptr && !impl_->read_only) {
    auto* self = const_cast<Region*>(this);
    size_t bytes = m == Method::kPool   ? sizeof(heap::PoolState)
                   : m == Method::kLast ? sizeof(heap::LastState)
                                        : sizeof(heap::SiteTable);
    auto [mem, construct] = self->reserve_root(name, bytes, 64, type, true);
    if (mem != nullptr && construct) {
      if (m == Method::kPool) new (mem) heap::PoolState{};
      else if (m == Method::kLast) new (mem) heap::LastState{};
      else new (mem) heap::SiteTable{};
      self->publish_root(name, true);
    }
    s = mem;
  }
  if (s == nullptr) return nullptr;
  if (m == Method::kPool && impl_->pool_records.load(std::memory_order_acquire) == nullptr) {
    // The records of the threads' caches, made with the state (or, in a
    // pool region made before them, at its first use since).
    uint64_t type = type_hash(kPoolRecordsType);
    uint64_t bytes = 0;
    void* p = impl_->ready_root(kPoolRecordsRoot, type, &bytes);
    if (p == nullptr && !impl_->read_only) {
      auto* self = const_cast<Region*>(this);
      bytes = uint64_t{impl_->region.max_owners} * sizeof(heap::PoolCacheRecord);
      auto [mem, construct] = self->reserve_root(kPoolRecordsRoot, bytes, alignof(heap::PoolCacheRecord), type, true);
      if (mem != nullptr && construct) {
        std::memset(mem, 0, bytes);
        self->publish_root(kPoolRecordsRoot, true);
      }
      p = mem;
    }
    impl_->pool_records.store(pool_records_at(*impl_, p, bytes), std::memory_order_release);
  }
  impl_->method_state.store(s, std::memory_order_release);
  return s;
}

void RegionImpl::return_pool_caches(const std::function<bool(uint32_t slot)>& dead) {
  if (method != Method::kPool) return;
  auto* state = static_cast<heap::PoolState*>(ready_root(state_root_name(method), root_type_hash(state_type_name(method))));
  uint64_t bytes = 0;
  void* p = ready_root(kPoolRecordsRoot, root_type_hash(kPoolRecordsType), &bytes);
  heap::PoolCacheRecord* records = pool_records_at(*this, p, bytes);
  if (state == nullptr || reinterpret_cast<uintptr_t>(state) % alignof(heap::PoolState) != 0 || records == nullptr) {
    return;
  }
  for (uint32_t slot = 0; slot < region.max_owners; ++slot) {
    if (dead(slot)) heap::pool_return_record(region, *state, &records[slot]);
  }
}

void Region::free_root_object(void* p) { (void)region::thread_heap_or_stranger(impl_->handle)->free(p); }

absl::Status Region::clear() {
  if (impl_->method == Method::kBest) {
    return absl::FailedPreconditionError(absl::StrCat(impl_->name, ": clear is for the pool, last, debug and ",
                                                      "profile methods; this region's method is best"));
  }
  if (books_in_site_table(impl_->method)) return debug_clear();
  if (impl_->read_only) return absl::FailedPreconditionError(absl::StrCat(impl_->name, ": attached read-only"));
  if (!impl_->registered) {
    return absl::FailedPreconditionError(absl::StrCat(impl_->name, ": this process does not allocate here"));
  }
  void* s = impl_->method_state.load(std::memory_order_acquire);
  if (s == nullptr) s = method_state();
  if (s == nullptr) return absl::ResourceExhaustedError(absl::StrCat(impl_->name, ": ", std::strerror(errno)));
  if (impl_->method == Method::kPool) heap::pool_clear(impl_->region, *static_cast<heap::PoolState*>(s), impl_->method_chunks);
  else heap::last_clear(impl_->region, *static_cast<heap::LastState*>(s), impl_->method_chunks);
  return absl::OkStatus();
}

MethodStats Region::method_stats() const {
  MethodStats out;
  out.method = impl_->method;
  if (impl_->method == Method::kBest) return out;
  if (books_in_site_table(impl_->method)) {
    debug_stats(&out);
    return out;
  }
  // Before the first allocation there is no state, and nothing to count.
  void* s = impl_->method_state.load(std::memory_order_acquire);
  if (s == nullptr) s = find_root(state_root_name(impl_->method), type_hash(state_type_name(impl_->method)), true);
  if (s == nullptr) return out;
  if (impl_->method == Method::kPool) {
    // This thread's claimed objects are not live: give them back first.
    heap::pool_cache_flush(impl_->region, pool_cache_of(*impl_));
    heap::PoolStats p = heap::pool_stats(impl_->region, *static_cast<const heap::PoolState*>(s));
    out.object_size = p.object_size;
    out.chunks = p.chunks;
    out.chunk_bytes = p.chunk_bytes;
    out.live_objects = p.live;
    out.capacity = p.capacity;
  } else {
    heap::LastStats l = heap::last_stats(impl_->region, *static_cast<const heap::LastState*>(s));
    out.chunks = l.chunks;
    out.chunk_bytes = l.chunk_bytes;
    out.used_bytes = l.used_bytes;
    out.ignored_frees = l.ignored_frees;
  }
  return out;
}

// --- the data plane of pool and last (region_calls.cc sends them here) ---

void* Region::method_alloc(size_t size, size_t align, bool zeroed, const void* caller) noexcept {
  if (books_in_site_table(impl_->method)) return debug_alloc(size, align, zeroed, caller);
  void* s = impl_->method_state.load(std::memory_order_acquire);
  if (s == nullptr) s = method_state();
  if (s == nullptr) return nullptr;
  void* p = nullptr;
  if (impl_->method == Method::kPool) {
    if (align > 16) {
      errno = EINVAL;  // pool objects are 16-aligned
      return nullptr;
    }
    heap::ThreadHeap* h = impl_->thread_heap();
    if (h == nullptr) return nullptr;
    if (h->pool_cache.record == nullptr) {
      // This thread's record: its owner slot's.
      heap::PoolCacheRecord* records = impl_->pool_records.load(std::memory_order_acquire);
      uint32_t slot = heap::slot_of(h->id());
      if (records != nullptr && slot < impl_->region.max_owners) h->pool_cache.record = &records[slot];
    }
    p = heap::pool_alloc(impl_->region, *static_cast<heap::PoolState*>(s), impl_->method_chunks, &h->pool_cache, size);
  } else {
    p = heap::last_alloc(impl_->region, *static_cast<heap::LastState*>(s), impl_->method_chunks, size, align);
  }
  if (p == nullptr) {
    if (errno == ENOMEM) impl_->event(RegionEvent::kNoMemory, nullptr, "allocation failed");
    return nullptr;
  }
  if (zeroed) std::memset(p, 0, size);
  return p;
}

void Region::method_free(void* p, const void* caller) noexcept {
  if (books_in_site_table(impl_->method)) return debug_free(p, caller);
  void* s = impl_->method_state.load(std::memory_order_acquire);
  if (s == nullptr) s = method_state();
  if (s == nullptr) return;
  heap::MethodFree f = impl_->method == Method::kPool
                           ? heap::pool_free(impl_->region, *static_cast<heap::PoolState*>(s), pool_cache_of(*impl_), p)
                           : heap::last_free(impl_->region, *static_cast<heap::LastState*>(s), p);
  if (f == heap::MethodFree::kOk || f == heap::MethodFree::kIgnored) return;
  bool twice = f == heap::MethodFree::kDoubleFree;
  impl_->event(RegionEvent::kBadAddress, p, twice ? "double free" : "not an object of the region's method");
  region::report_heap_error(twice ? region::HeapError::kDoubleFree : region::HeapError::kInvalidPointer,
                            "memd::Region::free", p, __builtin_return_address(0));
}

void* Region::method_resize(void* p, size_t size, const void* caller) noexcept {
  if (books_in_site_table(impl_->method)) return debug_resize(p, size, caller);
  void* s = impl_->method_state.load(std::memory_order_acquire);
  if (s == nullptr) s = method_state();
  if (s == nullptr) return nullptr;
  if (impl_->method == Method::kLast) {
    void* q = heap::last_resize(impl_->region, *static_cast<heap::LastState*>(s), impl_->method_chunks, p, size);
    if (q == nullptr && errno == EINVAL) impl_->event(RegionEvent::kBadAddress, p, "resize of a pointer that is not an object");
    return q;
  }
  // A pool's objects all have its one size: a resize within it is the same
  // object; any other size is refused, as an allocation of it would be.
  size_t have = heap::pool_size(impl_->region, *static_cast<heap::PoolState*>(s), pool_cache_of(*impl_), p);
  if (have == 0) {
    impl_->event(RegionEvent::kBadAddress, p, "resize of a pointer that is not a live object");
    errno = EINVAL;
    return nullptr;
  }
  if (size <= have) return p;
  errno = EINVAL;
  return nullptr;
}

size_t Region::method_size(const void* p) const {
  if (books_in_site_table(impl_->method)) return debug_size(p);
  void* s = impl_->method_state.load(std::memory_order_acquire);
  if (s == nullptr) s = method_state();
  if (s == nullptr) return 0;
  return impl_->method == Method::kPool ? heap::pool_size(impl_->region, *static_cast<heap::PoolState*>(s),
                                                         pool_cache_of(*impl_), p)
                                        : heap::last_size(impl_->region, *static_cast<heap::LastState*>(s), p);
}

}  // namespace memd
