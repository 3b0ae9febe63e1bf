// libmemd-malloc.so: malloc, free and friends, and C++ new/delete, on the
// process heap, for LD_PRELOAD.
//
//   malloc(n)     -> thread heap from TLS -> ThreadHeap::alloc   [no lock]
//                    first call in a thread: malloc_slow attaches one
//   free(p)       -> p inside the arena? ThreadHeap::free (own or remote)
//                    bootstrap memory: ignored; anything else: reported
//
// Re-entry: the slow path sets a thread-local flag; a malloc made while it
// is set (by a library the shim calls) is served by the bootstrap heap.
//
// Daemon mode (MEMD_REGION, daemon_mode.h): allocations go to a memd region
// instead, except gRPC's own; frees find their heap by address.
#include <dlfcn.h>
#include <malloc.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "region/diag.h"
#include "region/chain_merge.h"
#include "region/chain_pools.h"
#include "client/process_heap.h"
#include "client/shim/bootstrap_heap.h"
#include "client/shim/daemon_mode.h"

#define MEMD_EXPORT extern "C" __attribute__((visibility("default")))
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define LIKELY(x) __builtin_expect(!!(x), 1)

using memd::region::ArenaHandle;
using memd::heap::FreeStatus;
using memd::heap::ThreadHeap;

namespace {

__thread bool tl_in_shim __attribute__((tls_model("initial-exec")));

// The calling thread's heap in the process arena, or nullptr if it has none
// yet (one TLS load: the process arena has id 0 and is never destroyed).
inline ThreadHeap* current_heap() {
  return memd::region::tl_process_heap.heap;
}

void report_once_no_heap() {
  static std::atomic<bool> said{false};
  if (said.exchange(true)) return;
  const char msg[] = "memd: cannot create the process heap (see MEMD_RESERVE_GB); allocations fail\n";
  ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)ignored;
}

// The calling thread's heap, creating the process heap and attaching a thread
// heap as needed; nullptr when re-entered (use the bootstrap heap) or failed.
ThreadHeap* heap_slow(bool* reentered) {
  *reentered = tl_in_shim;
  if (tl_in_shim) return nullptr;
  tl_in_shim = true;
  const ArenaHandle& a = memd::client::process_arena();
  ThreadHeap* h = a.arena ? memd::region::thread_heap(a) : nullptr;
  tl_in_shim = false;
  if (a.arena == nullptr) report_once_no_heap();
  return h;
}

void* alloc_slow(size_t size, size_t align, bool zero) {
  bool reentered;
  ThreadHeap* h = heap_slow(&reentered);
  if (h == nullptr) return reentered ? memd::client::bootstrap_alloc(size, align) : nullptr;
  // Any alignment asked for goes to alloc_aligned, which knows which size
  // classes keep it (every one keeps 16; larger, only some).
  if (align != 0) return h->alloc_aligned(size, align);
  return zero ? h->alloc_zeroed(size) : h->alloc(size);
}

using memd::client::shim::region_heap_for_alloc;

// The program's call site, for the slow paths below. They are entered by a
// tail call from the exported function (or given `caller`), so their own
// return address is the program's: the fast paths compute none. (Naming
// __builtin_return_address in an exported function, even on a branch it
// rarely takes, costs that function a frame pointer on every call.)
#define MEMD_CALLER(caller) ((caller) != nullptr ? (caller) : __builtin_return_address(0))

// An allocation past the fast path's one test of alloc_detour: to the
// redirected heap if there is one for this thread, else from the process
// heap, in the pool of the caller's call chain (MEMD_CHAIN_POOLS) if it has
// one. `caller`: where the program's call returns to (nullptr: this
// function's return address, when it was tail-called from the entry point);
// `caller_cfa`: the entry point's canonical frame address, with a caller
// (nullptr: not known; a lengthened chain then unwinds).
__attribute__((noinline)) void* alloc_detoured(size_t size, bool zero, const void* caller,
                                               const void* caller_cfa = nullptr) {
  if (auto* r = region_heap_for_alloc()) return zero ? r->alloc_zeroed(size) : r->alloc(size);
  const void* ra = MEMD_CALLER(caller);
  ThreadHeap* h = current_heap();
  if (h == nullptr) return alloc_slow(size, 0, zero);
  // The entry point's frame: ours, when it tail-called us (caller nullptr).
  const void* entry_cfa = caller == nullptr ? __builtin_dwarf_cfa() : caller_cfa;
  uint32_t group = memd::region::chain_pools_enabled() ? memd::region::chain_pool_for(ra, entry_cfa, size) : 0;
  if (group == 0) return zero ? h->alloc_zeroed(size) : h->alloc(size);
  void* p = h->alloc_grouped(size, group);
  if (zero && p != nullptr) std::memset(p, 0, size);
  memd::region::chain_merge_allocated(h, group, p);
  return p;
}

// What alloc's inline path (the heap's try_alloc_fast) leaves: a sample, a
// new block, a big size, running out of memory.
__attribute__((noinline)) void* alloc_in_heap(ThreadHeap* h, size_t size) { return h->alloc(size); }

// `caller` as for alloc_detoured; nullptr only where the call is the entry
// point's last (a tail call).
inline void* alloc(size_t size, const void* caller) {
  if (UNLIKELY(memd::client::shim::alloc_detour.load(std::memory_order_relaxed))) {
    return alloc_detoured(size, false, caller);
  }
  if (ThreadHeap* h = current_heap(); LIKELY(h != nullptr)) {
    if (void* p = h->try_alloc_fast(size); LIKELY(p != nullptr)) return p;
    return alloc_in_heap(h, size);
  }
  return alloc_slow(size, 0, false);
}

inline void* alloc_aligned(size_t size, size_t align) {
  if (auto* r = region_heap_for_alloc(); UNLIKELY(r != nullptr)) return r->alloc_aligned(size, align);
  if (ThreadHeap* h = current_heap(); LIKELY(h != nullptr)) return h->alloc_aligned(size, align);
  return alloc_slow(size, align, false);
}

void report(FreeStatus s, const char* call, const void* p, const void* caller) {
  memd::region::report_heap_error(s == FreeStatus::kDoubleFree ? memd::region::HeapError::kDoubleFree
                                                               : memd::region::HeapError::kInvalidPointer,
                                  call, p, caller);
}

// Not the fast path: a thread without a heap (exiting, or one that never
// allocated), a pointer outside the arena, or the bootstrap heap's memory.
// free() never changes errno (POSIX 2024 requires it, and programs read
// errno after cleaning up): the slow paths may reach a discard, or in daemon
// mode an RPC, that sets it, so they put it back. The inline path sets none.
struct KeepErrno {
  int saved = errno;
  ~KeepErrno() { errno = saved; }
};

__attribute__((noinline)) void release_slow(void* p, const void* caller) {
  KeepErrno keep;
  caller = MEMD_CALLER(caller);
  const ArenaHandle* a = memd::client::process_arena_if_created();
  if (a != nullptr && a->arena->contains(p)) {
    FreeStatus s = a->arena->stranger()->free(p);
    if (UNLIKELY(s != FreeStatus::kOk)) report(s, "free", p, caller);
    return;
  }
  if (memd::client::bootstrap_contains(p)) return;
  if (memd::client::shim::free_if_region(p)) return;
  report(FreeStatus::kInvalid, "free", p, caller);
}

// A free neither inline path took; reports bad pointers.
__attribute__((noinline)) void release_other(ThreadHeap* h, void* p, uint64_t page_desc, const void* caller) {
  KeepErrno keep;
  caller = MEMD_CALLER(caller);
  FreeStatus s = h->free_slow(p, page_desc);
  if (UNLIKELY(s != FreeStatus::kOk)) report(s, "free", p, caller);
}

// A free the heap's inline path did not take: first the remote free of a
// small object, which makes no system call (errno stays as it is).
// It reads p's page descriptor again (an L1 hit): passed from the inline
// path, it kept a register busy there, which cost that path a saved register
// and a stack frame.
__attribute__((noinline)) void release_in_heap(ThreadHeap* h, void* p, const void* caller) {
  const uint64_t page_desc = h->page_desc_of(p);
  if (LIKELY(h->try_free_remote(p, page_desc))) return;
  return release_other(h, p, page_desc, caller);  // a tail call: it may name its own return address
}

// The fast path computes no caller address, and keeps nothing across a
// call: every way out is a return or a tail call, so it needs no stack frame.
// `caller` as for alloc_detoured.
__attribute__((always_inline)) inline void release(void* p, const void* caller) {
  if (UNLIKELY(p == nullptr)) return;
  ThreadHeap* h = current_heap();
  memd::heap::Offset off;
  // The thread's heap bounds p by the process arena's data pages, with the
  // subtraction its free reuses.
  if (LIKELY(h != nullptr && h->in_data(p, &off))) {
    uint64_t page_desc;
    if (LIKELY(h->try_free_local_at(p, off, &page_desc))) return;
    return release_in_heap(h, p, caller);
  }
  return release_slow(p, caller);
}

bool valid_alignment(size_t align) { return align != 0 && (align & (align - 1)) == 0; }

// The shim carries what it needs of the C++ runtime (linked statically, so
// that a C program under it does not load libstdc++) and is built without
// exceptions; the new_handler a program installs and the bad_alloc it
// catches are those of the program's runtime: look them up there. Only a
// program that calls operator new gets here, and such a program has its C++
// runtime loaded (else: shim.new_without_runtime).
std::new_handler program_new_handler() {
  using GetNewHandler = std::new_handler (*)();
  auto get = reinterpret_cast<GetNewHandler>(dlsym(RTLD_DEFAULT, "_ZSt15get_new_handlerv"));
  return get != nullptr ? get() : nullptr;
}

[[noreturn]] void throw_program_bad_alloc() {
  using ThrowBadAlloc = void (*)();
  auto throw_it = reinterpret_cast<ThrowBadAlloc>(dlsym(RTLD_DEFAULT, "_ZSt17__throw_bad_allocv"));
  if (throw_it != nullptr) throw_it();
  // A program whose C++ runtime is linked in and hidden: nothing here can
  // throw what it would catch (the shim is built without exceptions).
  const char msg[] = "memd: operator new failed, and the program's C++ runtime cannot be found to throw std::bad_alloc\n";
  ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)ignored;
  abort();
}

__attribute__((noinline)) void* new_or_throw(size_t size, size_t align, const void* caller) {
  // Tail-called by new (caller nullptr): our return address and frame are
  // the program's call, which the detour's call-chain lookup needs.
  const void* ra = MEMD_CALLER(caller);
  const void* cfa = caller == nullptr ? __builtin_dwarf_cfa() : nullptr;
  for (;;) {
    void* p = align != 0                                                   ? alloc_aligned(size, align)
              : memd::client::shim::alloc_detour.load(std::memory_order_relaxed) ? alloc_detoured(size, false, ra, cfa)
                                                                                  : alloc(size, ra);
    if (LIKELY(p != nullptr)) return p;
    std::new_handler handler = program_new_handler();
    if (handler == nullptr) throw_program_bad_alloc();
    handler();
  }
}

}  // namespace

MEMD_EXPORT void* malloc(size_t size) { return alloc(size, nullptr); }

MEMD_EXPORT void free(void* p) { release(p, nullptr); }
MEMD_EXPORT void cfree(void* p) { release(p, nullptr); }

MEMD_EXPORT void* calloc(size_t count, size_t size) {
  size_t total;
  if (UNLIKELY(__builtin_mul_overflow(count, size, &total))) {
    errno = ENOMEM;
    return nullptr;
  }
  if (UNLIKELY(memd::client::shim::alloc_detour.load(std::memory_order_relaxed))) {
    return alloc_detoured(total, true, nullptr);
  }
  if (ThreadHeap* h = current_heap(); LIKELY(h != nullptr)) return h->alloc_zeroed(total);
  return alloc_slow(total, 0, true);
}

MEMD_EXPORT void* realloc(void* p, size_t size) {
  if (p == nullptr) return alloc(size, nullptr);
  if (size == 0) {
    release(p, __builtin_return_address(0));
    return nullptr;
  }
  const ArenaHandle* a = memd::client::process_arena_if_created();
  if (a != nullptr && a->arena->contains(p)) {
    ThreadHeap* h = current_heap();
    bool reentered = false;
    if (h == nullptr) h = heap_slow(&reentered);
    if (h == nullptr) {
      errno = ENOMEM;
      return nullptr;
    }
    FreeStatus s = h->validate(p);
    if (UNLIKELY(s != FreeStatus::kOk)) {
      report(s, "realloc", p, __builtin_return_address(0));
      errno = EINVAL;
      return nullptr;
    }
    return h->realloc(p, size);
  }
  if (memd::client::bootstrap_contains(p)) {
    void* q = alloc(size, __builtin_return_address(0));
    if (q != nullptr) std::memcpy(q, p, std::min(size, memd::client::bootstrap_size(p)));
    return q;
  }
  if (const memd_daemon_heap* r = memd::client::shim::redirect_heap.load(std::memory_order_acquire);
      r != nullptr && r->contains(p)) {
    if (region_heap_for_alloc() != nullptr && !memd::client::shim::forked_child) return r->resize(p, size);
    // A thread that may not use the region (or a forked child): a copy in
    // the process heap; the region's object is left (or freed) as free does.
    void* q = alloc(size, __builtin_return_address(0));
    if (q != nullptr) {
      std::memcpy(q, p, std::min(size, r->usable_size(p)));
      memd::client::shim::free_if_region(p);
    }
    return q;
  }
  report(FreeStatus::kInvalid, "realloc", p, __builtin_return_address(0));
  errno = EINVAL;
  return nullptr;
}

MEMD_EXPORT void* reallocarray(void* p, size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return realloc(p, total);
}

MEMD_EXPORT void* memalign(size_t align, size_t size) {
  if (!valid_alignment(align)) {
    errno = EINVAL;
    return nullptr;
  }
  return alloc_aligned(size, align);
}

MEMD_EXPORT void* aligned_alloc(size_t align, size_t size) { return memalign(align, size); }

MEMD_EXPORT int posix_memalign(void** out, size_t align, size_t size) {
  if (!valid_alignment(align) || align % sizeof(void*) != 0) return EINVAL;
  int saved = errno;
  void* p = alloc_aligned(size, align);
  if (p == nullptr) {
    int e = errno;
    errno = saved;
    return e ? e : ENOMEM;
  }
  *out = p;
  return 0;
}

MEMD_EXPORT void* valloc(size_t size) { return memalign(4096, size); }

MEMD_EXPORT void* pvalloc(size_t size) {
  if (size > SIZE_MAX - 4095) {
    errno = ENOMEM;
    return nullptr;
  }
  size_t rounded = (size + 4095) & ~size_t{4095};
  return memalign(4096, rounded ? rounded : 4096);
}

MEMD_EXPORT size_t malloc_usable_size(void* p) {
  if (p == nullptr) return 0;
  const ArenaHandle* a = memd::client::process_arena_if_created();
  if (a != nullptr && a->arena->contains(p)) {
    ThreadHeap* h = memd::region::thread_heap_or_stranger(*a);
    if (h->validate(p) != FreeStatus::kOk) {
      report(h->validate(p), "malloc_usable_size", p, __builtin_return_address(0));
      return 0;
    }
    return h->usable_size(p);
  }
  if (memd::client::bootstrap_contains(p)) return memd::client::bootstrap_size(p);
  if (const memd_daemon_heap* r = memd::client::shim::redirect_heap.load(std::memory_order_acquire);
      r != nullptr && r->contains(p)) {
    return r->usable_size(p);
  }
  report(FreeStatus::kInvalid, "malloc_usable_size", p, __builtin_return_address(0));
  return 0;
}

MEMD_EXPORT int malloc_trim(size_t) {
  if (auto* r = region_heap_for_alloc()) r->trim();
  const ArenaHandle* a = memd::client::process_arena_if_created();
  if (a == nullptr) return 0;
  if (ThreadHeap* h = current_heap()) h->release_empty();
  a->arena->sweep_abandoned();
  a->arena->purge_all();
  return 1;
}

// --- C++ ---

// new: the heap's call-free fast path inline; anything else (a detour, a
// slow path, a failure to retry) in new_or_throw, by a tail call. With no
// call but tail calls, new needs no stack frame.
__attribute__((always_inline)) inline void* new_fast(size_t n) {
  if (UNLIKELY(memd::client::shim::alloc_detour.load(std::memory_order_relaxed))) return new_or_throw(n, 0, nullptr);
  if (ThreadHeap* h = current_heap(); LIKELY(h != nullptr)) {
    if (void* p = h->try_alloc_fast(n); LIKELY(p != nullptr)) return p;
  }
  return new_or_throw(n, 0, nullptr);
}
__attribute__((visibility("default"))) void* operator new(size_t n) { return new_fast(n); }
__attribute__((visibility("default"))) void* operator new[](size_t n) { return new_fast(n); }
__attribute__((visibility("default"))) void* operator new(size_t n, const std::nothrow_t&) noexcept { return alloc(n, nullptr); }
__attribute__((visibility("default"))) void* operator new[](size_t n, const std::nothrow_t&) noexcept { return alloc(n, nullptr); }
__attribute__((visibility("default"))) void* operator new(size_t n, std::align_val_t a) {
  return new_or_throw(n, static_cast<size_t>(a), nullptr);
}
__attribute__((visibility("default"))) void* operator new[](size_t n, std::align_val_t a) {
  return new_or_throw(n, static_cast<size_t>(a), nullptr);
}
__attribute__((visibility("default"))) void* operator new(size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return alloc_aligned(n, static_cast<size_t>(a));
}
__attribute__((visibility("default"))) void* operator new[](size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return alloc_aligned(n, static_cast<size_t>(a));
}

#define MEMD_DELETE(...) \
  __attribute__((visibility("default"))) void __VA_ARGS__ noexcept { release(p, nullptr); }
MEMD_DELETE(operator delete(void* p))
MEMD_DELETE(operator delete[](void* p))
MEMD_DELETE(operator delete(void* p, const std::nothrow_t&))
MEMD_DELETE(operator delete[](void* p, const std::nothrow_t&))
MEMD_DELETE(operator delete(void* p, size_t))
MEMD_DELETE(operator delete[](void* p, size_t))
MEMD_DELETE(operator delete(void* p, std::align_val_t))
MEMD_DELETE(operator delete[](void* p, std::align_val_t))
MEMD_DELETE(operator delete(void* p, size_t, std::align_val_t))
MEMD_DELETE(operator delete[](void* p, size_t, std::align_val_t))
MEMD_DELETE(operator delete(void* p, std::align_val_t, const std::nothrow_t&))
MEMD_DELETE(operator delete[](void* p, std::align_val_t, const std::nothrow_t&))
