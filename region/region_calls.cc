// memd::Region's calls once it is open: allocation, offsets, durability,
// checks (region.cc opens and closes regions, region_roots.cc has roots).
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "region/diag.h"
#include "region/region.h"
#include "region/chain_merge.h"
#include "region/chain_pools.h"
#include "region/region_impl.h"
#include "heap/inspect.h"

namespace memd {

// --- data plane ---

namespace {

// A free the heap refused (kDoubleFree or kInvalid): the region's event and
// the heap-error report, both naming the caller.
void report_refused_free(const RegionImpl& impl, heap::FreeStatus s, void* p, const void* caller) {
  impl.event(RegionEvent::kBadAddress, p, s == heap::FreeStatus::kDoubleFree ? "double free" : "not an object");
  region::report_heap_error(s == heap::FreeStatus::kDoubleFree ? region::HeapError::kDoubleFree
                                                               : region::HeapError::kInvalidPointer,
                            "memd::Region::free", p, caller);
}

}  // namespace

// alloc and free take the common case inline — the best method, a process
// that may write, this thread's heap — and leave the rest, with every
// report, to out-of-line calls: a fast path with no call in it needs no
// stack frame (the wrapper's register saves cost more than its checks).
void* Region::alloc(size_t size) noexcept {
  RegionImpl* impl = impl_.get();
  if (__builtin_expect(region::have_last_region_heap(impl->fast_heap_key()), 1)) {
    heap::ThreadHeap* h = region::last_region_heap();
    if (void* p = h->try_alloc_fast(size)) return p;
    return alloc_from(h, size);
  }
  return alloc_other(size, __builtin_return_address(0), __builtin_dwarf_cfa());
}

// alloc with the caller given. Not a shared inline body: alloc reading its
// own return address and frame on the slow branch only keeps its fast path
// frameless, which a helper taking them as arguments did not (GCC set up a
// frame pointer before the first test).
void* Region::alloc_as(size_t size, const void* caller, const void* caller_cfa) noexcept {
  RegionImpl* impl = impl_.get();
  if (__builtin_expect(region::have_last_region_heap(impl->fast_heap_key()), 1)) {
    heap::ThreadHeap* h = region::last_region_heap();
    if (void* p = h->try_alloc_fast(size)) return p;
    return alloc_from(h, size);
  }
  return alloc_other(size, caller, caller_cfa);
}

// The heap's own slow path (a new block, a sample, a big size), and the
// event if even that fails.
void* Region::alloc_from(heap::ThreadHeap* h, size_t size) noexcept {
  void* p = h->alloc(size);
  return p != nullptr ? p : alloc_failed();
}

void* Region::alloc_failed() noexcept {
  int saved = errno;
  impl_->event(RegionEvent::kNoMemory, nullptr, "allocation failed");
  errno = saved;
  return nullptr;
}

// Everything alloc's fast path leaves: a new block, a sample, a big size,
// a thread's first allocation (which attaches its heap).
void* Region::alloc_other(size_t size, const void* caller, const void* caller_cfa) noexcept {
  if (impl_->read_only) {
    errno = EROFS;
    return nullptr;
  }
  if (impl_->method != Method::kBest) return method_alloc(size, 16, false, caller);
  heap::ThreadHeap* h = impl_->thread_heap();
  uint32_t group = impl_->chain_pools && h != nullptr ? region::chain_pool_for(caller, caller_cfa, size) : 0;
  void* p = h == nullptr ? nullptr : group != 0 ? h->alloc_grouped(size, group) : h->alloc(size);
  if (p == nullptr) return alloc_failed();
  if (group != 0) region::chain_merge_allocated(h, group, p);
  return p;
}

void* Region::alloc_aligned(size_t size, size_t align) noexcept {
  if (align == 0 || (align & (align - 1)) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  if (impl_->read_only) {
    errno = EROFS;
    return nullptr;
  }
  if (impl_->method != Method::kBest) return method_alloc(size, align, false, __builtin_return_address(0));
  heap::ThreadHeap* h = impl_->thread_heap();
  return h ? h->alloc_aligned(size, align) : nullptr;
}

void* Region::alloc_zeroed(size_t size) noexcept {
  if (impl_->read_only) {
    errno = EROFS;
    return nullptr;
  }
  if (impl_->method != Method::kBest) return method_alloc(size, 16, true, __builtin_return_address(0));
  heap::ThreadHeap* h = impl_->thread_heap();
  return h ? h->alloc_zeroed(size) : nullptr;
}

void Region::free_from(void* p, const void* caller) noexcept {
  if (p == nullptr) return;
  if (impl_->read_only) {
    errno = EROFS;
    return;
  }
  if (!impl_->registered) {
    errno = EPERM;
    return;
  }
  // The debug and profile methods report a bad pointer in their own form.
  if (impl_->method == Method::kDebug || impl_->method == Method::kProfile) {
    return method_free(p, caller);
  }
  if (!contains(p)) {
    impl_->event(RegionEvent::kBadAddress, p, "free of a pointer outside the region");
    region::report_heap_error(region::HeapError::kInvalidPointer, "memd::Region::free", p, caller);
    return;
  }
  if (impl_->method != Method::kBest) return method_free(p, caller);
  heap::FreeStatus s = region::thread_heap_or_stranger(impl_->handle)->free(p);
  if (s != heap::FreeStatus::kOk) report_refused_free(*impl_, s, p, caller);
}

void Region::free(void* p) noexcept {
  RegionImpl* impl = impl_.get();
  // An object of a block this thread owns, freed onto its list; past that,
  // the heap's slow path with the page descriptor already read
  // (free_past_local). Other methods, a stranger thread, a pointer outside
  // the region: free_from, with every check.
  heap::Offset off;
  // The heap's own bound of the region's data pages: impl->region.contains
  // without a subtraction of its own.
  if (__builtin_expect(region::have_last_region_heap(impl->fast_heap_key()) &&
                           region::last_region_heap()->in_data(p, &off),
                       1)) {
    heap::ThreadHeap* h = region::last_region_heap();
    uint64_t page_desc;
    if (__builtin_expect(h->try_free_local_at(p, off, &page_desc), 1)) return;
    return free_past_local(h, p, __builtin_return_address(0));
  }
  free_from(p, __builtin_return_address(0));
}

// The heap's own slow path of a free whose page descriptor free just read
// (a block that changes lists, a remote or big free, a bad pointer), and
// its report.
void Region::free_past_local(heap::ThreadHeap* h, void* p, const void* caller) noexcept {
  heap::FreeStatus s = h->free_slow(p, h->page_desc_of(p));
  if (__builtin_expect(s != heap::FreeStatus::kOk, 0)) report_refused_free(*impl_, s, p, caller);
}

size_t Region::alloc_batch(size_t n, size_t size, void** out) noexcept {
  if (n == 0) return 0;
  if (out == nullptr) {
    errno = EINVAL;
    return 0;
  }
  if (impl_->read_only) {
    errno = EROFS;
    return 0;
  }
  const void* caller = __builtin_return_address(0);
  size_t got = 0;
  if (impl_->method != Method::kBest) {
    for (; got < n; ++got) {
      void* p = method_alloc(size, 16, false, caller);
      if (p == nullptr) break;
      out[got] = p;
    }
    return got;
  }
  heap::ThreadHeap* h = impl_->thread_heap();
  if (h != nullptr) got = h->alloc_batch(n, size, out);
  if (got < n) impl_->event(RegionEvent::kNoMemory, nullptr, "allocation failed");
  return got;
}

void* Region::alloc_near(size_t size, const void* hint, size_t near_bytes) noexcept {
  if (impl_->read_only) {
    errno = EROFS;
    return nullptr;
  }
  if (impl_->method != Method::kBest) return method_alloc(size, 16, false, __builtin_return_address(0));
  heap::ThreadHeap* h = impl_->thread_heap();
  void* p = h ? h->alloc_near(size, hint, near_bytes) : nullptr;
  if (p == nullptr) impl_->event(RegionEvent::kNoMemory, nullptr, "allocation failed");
  return p;
}

void Region::free_batch(void* const* p, size_t n) noexcept {
  if (p == nullptr) return;
  const void* caller = __builtin_return_address(0);
  // The frees of another thread's block go to it as one chain (the heap
  // free_from uses is this thread's own, when it has one).
  heap::ThreadHeap* h = impl_->plain_data_plane() ? region::thread_heap_if_attached(impl_->handle) : nullptr;
  heap::ThreadHeap::GatherRemoteFrees gather(h);
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != nullptr) free_from(p[i], caller);
  }
}

void* Region::resize(void* p, size_t size) noexcept {
  if (p == nullptr) return alloc(size);
  if (size == 0) {
    free(p);
    return nullptr;
  }
  heap::ThreadHeap* h = impl_->read_only ? nullptr : impl_->thread_heap();
  if (h == nullptr) return nullptr;
  if (impl_->method != Method::kBest) return method_resize(p, size, __builtin_return_address(0));
  if (!contains(p) || h->validate(p) != heap::FreeStatus::kOk) {
    impl_->event(RegionEvent::kBadAddress, p, "resize of a pointer that is not a live object");
    errno = EINVAL;
    return nullptr;
  }
  return h->realloc(p, size);
}

size_t Region::size(const void* p) const {
  if (!contains(p)) return 0;
  // A read-only view has no thread heap: the descriptors alone say.
  if (!impl_->registered) return impl_->read_only ? heap::region_object_bytes(impl_->region, *impl_->classes, p) : 0;
  if (impl_->method != Method::kBest) return method_size(p);
  heap::ThreadHeap* h = region::thread_heap_or_stranger(impl_->handle);
  return h->validate(p) == heap::FreeStatus::kOk ? h->usable_size(const_cast<void*>(p)) : 0;
}

void* Region::addr(const void* p) const {
  if (!contains(p) || !impl_->registered) return nullptr;
  if (impl_->method == Method::kDebug || impl_->method == Method::kProfile) return debug_addr(p);
  if (impl_->method != Method::kBest) return method_size(p) != 0 ? const_cast<void*>(p) : nullptr;
  return heap::region_object_start(impl_->region, *impl_->classes, p);
}

uint64_t Region::offset_of(const void* p) const { return impl_->region.offset_of(p); }
void* Region::at(uint64_t offset) const { return impl_->region.data + offset; }
bool Region::contains(const void* p) const { return impl_->region.contains(p); }
char* Region::base() const { return impl_->region.base; }
bool Region::at_preferred_address() const {
  return reinterpret_cast<uintptr_t>(impl_->region.base) == impl_->region.header->preferred_base;
}

// --- durability, checks ---

absl::Status Region::persist(const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  if (c < impl_->region.base || n > impl_->source->reserved_bytes() ||
      static_cast<size_t>(c - impl_->region.base) > impl_->source->reserved_bytes() - n) {
    return absl::OutOfRangeError("persist of a range outside the region");
  }
  // The discipline rounds out to what it must (pages for msync).
  if (!impl_->source->persist(static_cast<size_t>(c - impl_->region.base), n)) {
    return absl::InternalError(absl::StrCat("persist failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status Region::checkpoint() {
  // Up to the last committed page: a cache-flushing discipline need not
  // flush a line past it. msync writes back only the pages dirtied since
  // the last checkpoint on its own.
  if (!impl_->source->persist(0, impl_->written_span())) {
    return absl::InternalError(absl::StrCat("checkpoint failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

void Region::compact() {
  if (impl_->read_only) return;
  // An owner that only serves leases (the daemon) has no heap of its own
  // here, but still discards free pages and cuts the free tail.
  if (impl_->registered) {
    if (impl_->method == Method::kBest) free_orphaned_reservations();
    if (heap::ThreadHeap* h = region::thread_heap_or_stranger(impl_->handle); h != impl_->pool.stranger()) {
      h->release_empty();
    }
  }
  if (impl_->leased) impl_->leased->return_all();
  if (impl_->pages) {
    impl_->pages->sweep_abandoned();
    impl_->pages->purge_all();
  }
}

absl::Status Region::check() {
  char message[256];
  bool ok = impl_->pages ? impl_->pages->check(message, sizeof message) &&
                               impl_->service->check(message, sizeof message)
                         : heap::region_check(impl_->region, *impl_->classes, message, sizeof message);
  if (ok) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("region ", impl_->name, ": ", message));
}

absl::Status Region::check_while_in_use(uint32_t* skipped) {
  if (!impl_->pages) return absl::FailedPreconditionError("only the region's owner checks it while in use");
  char message[256];
  if (impl_->pages->check(message, sizeof message, true, skipped) && impl_->service->check(message, sizeof message)) {
    return absl::OkStatus();
  }
  return absl::InternalError(absl::StrCat("region ", impl_->name, ": ", message));
}

heap::CounterSnapshot Region::counters() const {
  heap::CounterSnapshot c;
  impl_->pool.sum_counters(&c);
  return c;
}

void Region::add_counters(heap::CounterSnapshot* out) const { impl_->pool.sum_counters(out); }

const char* Region::data_base() const { return impl_->region.data; }

void Region::give_back_spares() {
  if (impl_->leased) impl_->leased->return_all();
}

bool Region::remap_private_in_child() { return impl_->source->remap_private_in_child(); }

heap::RegionStats Region::stat() {
  if (impl_->pages) return impl_->pages->stat();
  return heap::region_stat(impl_->region, *impl_->classes);
}

namespace {
// The header's fields fixed at creation (identity, geometry, classes,
// parameters): everything before the lifecycle fields.
size_t fixed_header_bytes(const heap::RegionHeader& h) {
  return static_cast<size_t>(reinterpret_cast<const char*>(&h.generation) - reinterpret_cast<const char*>(&h));
}
}  // namespace

void RegionImpl::keep_header_copy() {
  const char* h = reinterpret_cast<const char*>(region.header);
  header_copy.assign(h, h + fixed_header_bytes(*region.header));
}

uint64_t Region::object_bytes() const { return impl_->source->known_length(); }

void Region::set_length_policy(LengthPolicy policy, void* context) {
  impl_->source->set_length_policy(policy, context);
}

absl::Status Region::backing_status() const {
  if (absl::Status s = impl_->source->backing_status(); !s.ok()) return s;
  const heap::RegionHeader& h = *impl_->region.header;
  if (!impl_->header_copy.empty()) {
    // Sizes and offsets of every table are read from here: changed under
    // the owner, they would send it outside the mapping.
    if (std::memcmp(&h, impl_->header_copy.data(), impl_->header_copy.size()) != 0) {
      return absl::DataLossError(absl::StrCat(impl_->name, ": the region's header was overwritten"));
    }
    if (h.page_heap.committed_pages.load(std::memory_order_acquire) > h.max_pages) {
      return absl::DataLossError(absl::StrCat(impl_->name, ": the header's count of committed pages was overwritten"));
    }
  }
  return absl::OkStatus();
}
absl::Status Region::repair_backing(bool* repaired) {
  if (repaired != nullptr) *repaired = false;
  absl::Status s = backing_status();
  if (s.ok() || !impl_->owner() || impl_->header_copy.empty() || impl_->damaged) return s;
  if (absl::Status backing = impl_->source->backing_status(); !backing.ok()) return backing;
  char* h = reinterpret_cast<char*>(impl_->region.header);
  if (std::memcmp(h, impl_->header_copy.data(), impl_->header_copy.size()) == 0) return s;
  // The caller serializes calls (the daemon holds the region's lock, the
  // lease server has one thread), so only other processes may read the
  // header while it is written back: one attaching now may see a mix of
  // old and restored bytes, which its own validation refuses (it retries).
  std::memcpy(h, impl_->header_copy.data(), impl_->header_copy.size());
  (void)impl_->source->persist(0, impl_->header_copy.size());  // a file region: durable again
  if (repaired != nullptr) *repaired = true;
  return backing_status();
}

void Region::mark_damaged() { impl_->damaged = true; }

void Region::set_event_handler(RegionEventHandler handler, void* context) {
  impl_->handler = handler;
  impl_->handler_context = context;
}

void Region::set_chain_pools(bool on) {
  if (on && !region::chain_pools_enabled()) region::chain_pools_enable(region::ChainPoolOptions{});
  impl_->chain_pools = on;
  impl_->refresh_data_plane();
}

std::optional<Discipline> discipline_from_number(uint64_t n) {
  switch (n) {
    case 0: return Discipline{};
    case static_cast<uint32_t>(Discipline::kShm): return Discipline::kShm;
    case static_cast<uint32_t>(Discipline::kFile): return Discipline::kFile;
    case static_cast<uint32_t>(Discipline::kPmem): return Discipline::kPmem;
    default: return std::nullopt;
  }
}

std::optional<Method> method_from_number(uint64_t n) {
  switch (n) {
    case 0: return Method{};
    case static_cast<uint32_t>(Method::kBest): return Method::kBest;
    case static_cast<uint32_t>(Method::kPool): return Method::kPool;
    case static_cast<uint32_t>(Method::kLast): return Method::kLast;
    case static_cast<uint32_t>(Method::kDebug): return Method::kDebug;
    case static_cast<uint32_t>(Method::kProfile): return Method::kProfile;
    default: return std::nullopt;
  }
}

const char* method_name(Method m) {
  switch (m) {
    case Method::kBest: return "best";
    case Method::kPool: return "pool";
    case Method::kLast: return "last";
    case Method::kDebug: return "debug";
    case Method::kProfile: return "profile";
  }
  return "unspecified";
}

const char* discipline_name(Discipline d) {
  switch (d) {
    case Discipline::kShm: return "shm";
    case Discipline::kFile: return "file";
    case Discipline::kPmem: return "pmem";
  }
  return "?";
}

bool Region::is_owner() const { return impl_->owner(); }
bool Region::read_only() const { return impl_->read_only; }
Discipline Region::discipline() const { return impl_->discipline; }
Method Region::method() const { return impl_->method; }
uint64_t Region::generation() const { return impl_->region.header->generation.load(); }

}  // namespace memd
