// vmalloc.h over memd: a Vmalloc_t is a memd::Region (Vmbest, Vmpool,
// Vmlast, on any discipline) or a DebugMethod (Vmdebug, Vmprofile, on
// private memory), or Vmheap (malloc itself). A private region is a shm
// region whose name is removed as soon as it is made: the same code as a
// shared one, and no other process can open it.
#include "client/vmalloc.h"

#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "client/debug_method.h"
#include "region/profile_sites.h"
#include "client/shim/vmregion_link.h"
#include "client/status_errno.h"
#include "region/call_site.h"
#include "client/trace_line.h"
#include "region/region.h"

namespace {

using memd::Region;
using memd::client::errno_of;
using memd::client::DebugMethod;
using memd::heap::DebugSite;

enum class Kind { kHeap, kRegion, kDebug };

Vmdisc_t cheap_disc{vmdcmemory, nullptr, 0, VM_DCPRIVATE, nullptr, 0};
Vmdisc_t csbrk_disc{vmdcmemory, nullptr, 0, VM_DCPRIVATE, nullptr, 0};
Vmethod_t best_method{VM_MTBEST, "best"};
Vmethod_t pool_method{VM_MTPOOL, "pool"};
Vmethod_t last_method{VM_MTLAST, "last"};
Vmethod_t debug_method{VM_MTDEBUG, "debug"};
Vmethod_t profile_method{VM_MTPROFILE, "profile"};

constexpr size_t kDefaultMaxBytes = size_t{1} << 30;

std::atomic<int> trace_fd{-1};
// The site -DVMFL recorded for this thread's next call.
thread_local const char* tl_file = nullptr;
thread_local int tl_line = 0;

}  // namespace

struct _vmalloc_s {
  Kind kind = Kind::kHeap;
  Vmdisc_t* disc = nullptr;
  Vmethod_t* meth = nullptr;
  int flags = 0;
  std::unique_ptr<Region> region;
  std::unique_ptr<DebugMethod> debug;
  std::unique_ptr<memd::region::ProfileSites> profile;
  char label[40] = {};
  uint64_t trace_start_us = 0;
  _vmalloc_s* next = nullptr;  // the open regions
};

namespace {

_vmalloc_s heap_region{Kind::kHeap, &cheap_disc, &best_method, 0, nullptr, nullptr, nullptr, "(heap)", 0, nullptr};

// Open regions, for vmregion and vmprofile(NULL).
pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
_vmalloc_s* open_regions = nullptr;

struct Locked {
  Locked() { pthread_mutex_lock(&open_lock); }
  ~Locked() { pthread_mutex_unlock(&open_lock); }
};

// The calling site: what -DVMFL recorded, else the return address the
// entry point passes.
DebugSite site_of(const void* pc) {
  DebugSite s;
  if (tl_file != nullptr) {
    s.file = tl_file;
    s.line = static_cast<uint32_t>(tl_line);
    tl_file = nullptr;
  } else {
    s.pc = pc;
  }
  return s;
}

// vmdisc may change a region's discipline while other threads use it.
Vmdisc_t* disc_of(const Vmalloc_t* vm) { return __atomic_load_n(&vm->disc, __ATOMIC_ACQUIRE); }

void except(Vmalloc_t* vm, int type, void* obj) {
  Vmdisc_t* disc = disc_of(vm);
  if (disc != nullptr && disc->exceptf != nullptr) disc->exceptf(vm, type, obj, disc);
}

// Whether `next` gives the same memory as `now`: the only discipline a
// region can change to, since its tables live in that memory.
bool same_memory(const Vmdisc_t* now, const Vmdisc_t* next) {
  if (next->memoryf != vmdcmemory || next->kind != now->kind) return false;
  if (now->kind == VM_DCPRIVATE) return true;
  return next->name != nullptr && std::strcmp(next->name, now->name) == 0;
}

// The address the calling thread's last call had refused (vmfree's answer
// without asking the region twice).
thread_local const void* tl_refused = nullptr;

void region_event(void* context, memd::RegionEvent event, const void* address, const char*) {
  auto* vm = static_cast<Vmalloc_t*>(context);
  if (event == memd::RegionEvent::kBadAddress) tl_refused = address;
  int type = event == memd::RegionEvent::kOpen       ? VM_OPEN
             : event == memd::RegionEvent::kClose    ? VM_CLOSE
             : event == memd::RegionEvent::kNoMemory ? VM_NOMEM
                                                     : VM_BADADDR;
  except(vm, type, const_cast<void*>(address));
}

void debug_error(void* context, const void* block, const char* what) {
  // Overwrites are reports only; a call given a bad address is VM_BADADDR.
  if (std::strcmp(what, "unallocated block") == 0 || std::strcmp(what, "already freed") == 0) {
    except(static_cast<Vmalloc_t*>(context), VM_BADADDR, const_cast<void*>(block));
  }
}

bool traced(const Vmalloc_t* vm) { return (vm->flags & VM_TRACE) != 0 && trace_fd.load(std::memory_order_relaxed) >= 0; }

void trace(const Vmalloc_t* vm, const void* old, const void* now, uint64_t size, const DebugSite& site) {
  int fd = trace_fd.load(std::memory_order_relaxed);
  if (fd >= 0) memd::client::write_trace_line(fd, old, now, size, vm->label, vm->meth->name, site, vm->trace_start_us);
}

absl::StatusOr<std::unique_ptr<Region>> open_named(const Vmdisc_t* d, const memd::RegionOptions& options) {
  memd::Discipline discipline = options.discipline;
  absl::StatusOr<std::unique_ptr<Region>> r = Region::open(d->name, discipline, options.method);
  if (r.ok() || r.status().code() != absl::StatusCode::kNotFound) return r;
  r = Region::create(d->name, options);
  // Another process made it meanwhile: open that one.
  if (!r.ok() && r.status().code() == absl::StatusCode::kAlreadyExists) {
    return Region::open(d->name, discipline, options.method);
  }
  return r;
}

Vmalloc_t* fail(int e) {
  errno = e;
  return nullptr;
}

void link_open(Vmalloc_t* vm) {
  Locked locked;
  vm->next = open_regions;
  open_regions = vm;
}

void unlink_open(Vmalloc_t* vm) {
  Locked locked;
  for (Vmalloc_t** p = &open_regions; *p != nullptr; p = &(*p)->next) {
    if (*p == vm) {
      *p = vm->next;
      return;
    }
  }
}

bool open_region(Vmalloc_t* vm) {
  memd::RegionOptions options;
  options.method = vm->meth->id == VM_MTPOOL      ? memd::Method::kPool
                   : vm->meth->id == VM_MTLAST    ? memd::Method::kLast
                   : vm->meth->id == VM_MTDEBUG   ? memd::Method::kDebug
                   : vm->meth->id == VM_MTPROFILE ? memd::Method::kProfile
                                                  : memd::Method::kBest;
  options.max_bytes = vm->disc->max_bytes != 0 ? vm->disc->max_bytes : kDefaultMaxBytes;
  options.event_handler = region_event;
  options.event_context = vm;
  absl::StatusOr<std::unique_ptr<Region>> r;
  if (vm->disc->kind == VM_DCPRIVATE) {
    r = Region::create_private(options);
  } else {
    options.discipline = static_cast<memd::Discipline>(vm->disc->kind);
    r = open_named(vm->disc, options);
  }
  if (!r.ok()) {
    errno = errno_of(r.status());
    return false;
  }
  vm->region = std::move(*r);
  vm->region->set_debug_options({(vm->flags & VM_DBCHECK) != 0, (vm->flags & VM_DBABORT) != 0});
  if ((vm->flags & VM_CHAINPOOL) != 0) vm->region->set_chain_pools(true);
  return true;
}

bool open_debug(Vmalloc_t* vm) {
  memd::client::DebugSettings s;
  s.debug = vm->meth->id == VM_MTDEBUG;
  s.check = (vm->flags & VM_DBCHECK) != 0;
  s.abort = (vm->flags & VM_DBABORT) != 0;
  if ((vm->flags & VM_TRACE) != 0) s.trace_fd = trace_fd.load();
  if (vm->meth->id == VM_MTPROFILE) {
    vm->profile.reset(new (std::nothrow) memd::region::ProfileSites());
    if (vm->profile == nullptr) return fail(ENOMEM), false;
  }
  vm->debug = std::make_unique<DebugMethod>();
  if (!vm->debug->start(s, vm->label, vm->profile.get())) return false;
  vm->debug->set_error_hook(debug_error, vm);
  return true;
}

// The usable (or, under Vmdebug, asked-for) size of a live block, 0 if it
// is not one.
size_t live_size(Vmalloc_t* vm, const void* p) {
  switch (vm->kind) {
    case Kind::kHeap: return p != nullptr ? malloc_usable_size(const_cast<void*>(p)) : 0;
    case Kind::kRegion: return vm->region->size(p);
    case Kind::kDebug: return vm->debug->size(p, nullptr);
  }
  return 0;
}

// A named region's debug and profile methods keep their books in the
// region; they name the site the call was made for (region/call_site.h).
bool books_in_region(const Vmalloc_t* vm) {
  return vm->kind == Kind::kRegion && (vm->meth->id == VM_MTDEBUG || vm->meth->id == VM_MTPROFILE);
}

// `hint` (with `near_bytes`): an object near it if the method can place
// one there (Vmbest regions); elsewhere, and when it cannot, as without.
// `caller_cfa`: the frame of the entry point `pc` returns from, given by
// vmalloc so that call-chain pools (VM_CHAINPOOL) start the chain at the
// program's call, as the C API does, not inside this library.
void* alloc_in(Vmalloc_t* vm, size_t size, size_t align, const void* pc, const void* hint = nullptr,
               size_t near_bytes = 0, const void* caller_cfa = nullptr) {
  if (vm == nullptr) return fail(EINVAL);
  if (align != 0 && (align & (align - 1)) != 0) return fail(EINVAL);
  DebugSite site = site_of(pc);
  memd::region::CallSiteScope at(site);
  void* p = nullptr;
  switch (vm->kind) {
    case Kind::kHeap:
      if (align == 0) {
        p = std::malloc(size);
      } else if (posix_memalign(&p, align < sizeof(void*) ? sizeof(void*) : align, size) != 0) {
        p = nullptr, errno = ENOMEM;
      }
      break;
    case Kind::kRegion:
      if (align != 0) {
        p = vm->region->alloc_aligned(size, align);
      } else if (hint != nullptr && vm->meth->id == VM_MTBEST) {
        p = vm->region->alloc_near(size, hint, near_bytes);
      } else if (caller_cfa != nullptr && !books_in_region(vm)) {
        p = vm->region->alloc_as(size, pc, caller_cfa);
      } else {
        p = vm->region->alloc(size);
      }
      break;
    case Kind::kDebug:
      p = vm->debug->alloc(size, align, false, site);
      if (p == nullptr) except(vm, VM_NOMEM, nullptr);
      return p;  // traced by the method
  }
  if (p != nullptr && traced(vm)) trace(vm, nullptr, p, size, site);
  return p;
}

}  // namespace

Vmdisc_t* Vmdcheap = &cheap_disc;
Vmdisc_t* Vmdcsbrk = &csbrk_disc;
Vmethod_t* Vmbest = &best_method;
Vmethod_t* Vmpool = &pool_method;
Vmethod_t* Vmlast = &last_method;
Vmethod_t* Vmdebug = &debug_method;
Vmethod_t* Vmprofile = &profile_method;
Vmalloc_t* Vmheap = &heap_region;
Vmalloc_t* Vmregion = &heap_region;

extern "C" {

void* vmdcmemory(Vmalloc_t*, void*, size_t, size_t, Vmdisc_t*) { return nullptr; }

static Vmdisc_t* named_disc(Vmdisc_t* disc, int kind, const char* name, size_t max_bytes) {
  if (disc == nullptr) return nullptr;
  *disc = Vmdisc_t{vmdcmemory, nullptr, 0, kind, name, max_bytes};
  return disc;
}
Vmdisc_t* vmdcshm(Vmdisc_t* disc, const char* name, size_t max_bytes) { return named_disc(disc, VM_DCSHM, name, max_bytes); }
Vmdisc_t* vmdcfile(Vmdisc_t* disc, const char* path, size_t max_bytes) { return named_disc(disc, VM_DCFILE, path, max_bytes); }
Vmdisc_t* vmdcpmem(Vmdisc_t* disc, const char* path, size_t max_bytes) { return named_disc(disc, VM_DCPMEM, path, max_bytes); }

void vmflsite_(const char* file, int line) {
  tl_file = file;
  tl_line = line;
}

// --- Vmregion: malloc through the shim (client/shim/vmregion_link.h) ---

// vmfree and vmresize for a caller that names the site.
static int free_at(Vmalloc_t* vm, void* data, const void* pc);
static void* resize_at(Vmalloc_t* vm, void* data, size_t size, int type, const void* pc);


// The program's call site, which the shim found (a debug, profile or
// traced region only: finding it walks the stack).
static thread_local const void* tl_malloc_pc = nullptr;
static int vmregion_wants_site(void* vm) {
  auto* v = static_cast<Vmalloc_t*>(vm);
  return v->meth->id == VM_MTDEBUG || v->meth->id == VM_MTPROFILE || traced(v) ? 1 : 0;
}
static void vmregion_site(const char* file, int line, const void* pc) {
  if (file != nullptr) vmflsite_(file, line);
  tl_malloc_pc = pc;
}
static const void* take_malloc_pc() {
  const void* pc = tl_malloc_pc;
  tl_malloc_pc = nullptr;
  return pc;
}
static void* vmregion_alloc(void* vm, size_t size, size_t align) {
  return alloc_in(static_cast<Vmalloc_t*>(vm), size, align, take_malloc_pc());
}
static void* vmregion_resize(void* vm, void* p, size_t size) {
  return resize_at(static_cast<Vmalloc_t*>(vm), p, size, VM_RSMOVE, take_malloc_pc());
}
static void vmregion_free(void* vm, void* p) { (void)free_at(static_cast<Vmalloc_t*>(vm), p, take_malloc_pc()); }
static size_t vmregion_size(void* vm, const void* p) {
  long n = vmsize(static_cast<Vmalloc_t*>(vm), const_cast<void*>(p));
  return n > 0 ? static_cast<size_t>(n) : 0;
}
static void* vmregion_of(const void* p) { return vmregion(const_cast<void*>(p)); }

static std::atomic<int> malloc_follows{-1};  // -1: not asked yet

// At the first vmopen: asks the shim, if it is the process's malloc, to
// follow Vmregion.
static void follow_vmregion_once() {
  if (malloc_follows.load(std::memory_order_acquire) >= 0) return;
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, [] {
    static const memd_vmregion_calls calls{reinterpret_cast<void* const*>(&Vmregion),
                                           &heap_region,
                                           vmregion_alloc,
                                           vmregion_resize,
                                           vmregion_free,
                                           vmregion_size,
                                           vmregion_of,
                                           vmregion_wants_site,
                                           vmregion_site};
    auto use = reinterpret_cast<memd_shim_use_vmregion_fn>(dlsym(RTLD_DEFAULT, "memd_shim_use_vmregion"));
    malloc_follows.store(use != nullptr && use(&calls) == 0 ? 1 : 0, std::memory_order_release);
  });
}

int vmregionmalloc(void) {
  follow_vmregion_once();
  return malloc_follows.load(std::memory_order_acquire);
}

Vmalloc_t* vmopen(Vmdisc_t* disc, Vmethod_t* meth, int flags) {
  follow_vmregion_once();
  if (disc == nullptr || meth == nullptr || disc->memoryf != vmdcmemory) return fail(EINVAL);
  if (disc->kind < VM_DCPRIVATE || disc->kind > VM_DCPMEM) return fail(EINVAL);
  if (meth->id < VM_MTBEST || meth->id > VM_MTPROFILE) return fail(EINVAL);
  if (disc->kind != VM_DCPRIVATE && disc->name == nullptr) return fail(EINVAL);
  if ((flags & ~(VM_TRUST | VM_TRACE | VM_DBCHECK | VM_DBABORT | VM_CHAINPOOL)) != 0) return fail(EINVAL);
  // Call-chain pools are the best heap's.
  if ((flags & VM_CHAINPOOL) != 0 && meth->id != VM_MTBEST) return fail(EINVAL);
  auto* vm = new (std::nothrow) _vmalloc_s();
  if (vm == nullptr) return fail(ENOMEM);
  vm->disc = disc;
  vm->meth = meth;
  vm->flags = flags;
  vm->trace_start_us = memd::client::monotonic_us();
  if (disc->kind == VM_DCPRIVATE) std::snprintf(vm->label, sizeof vm->label, "%p", static_cast<void*>(vm));
  else std::snprintf(vm->label, sizeof vm->label, "%s", disc->name);
  bool ok;
  if (meth->id >= VM_MTDEBUG && disc->kind == VM_DCPRIVATE) {
    vm->kind = Kind::kDebug;
    ok = open_debug(vm);
    if (ok) except(vm, VM_OPEN, nullptr);
  } else {
    vm->kind = Kind::kRegion;
    ok = open_region(vm);  // the region says VM_OPEN itself
  }
  if (!ok) {
    int e = errno;
    delete vm;
    return fail(e);
  }
  link_open(vm);
  return vm;
}

Vmdisc_t* vmdisc(Vmalloc_t* vm, Vmdisc_t* disc) {
  if (vm == nullptr) return errno = EINVAL, nullptr;
  Vmdisc_t* old = disc_of(vm);
  if (disc == nullptr || disc == old) return old;
  if (!same_memory(old, disc)) return errno = EINVAL, nullptr;
  // The old discipline may refuse, as in Vmalloc.
  if (old->exceptf != nullptr && old->exceptf(vm, VM_DISC, disc, old) < 0) return errno = ECANCELED, nullptr;
  __atomic_store_n(&vm->disc, disc, __ATOMIC_RELEASE);
  return old;
}

int vmclose(Vmalloc_t* vm) {
  if (vm == nullptr || vm == Vmheap) return errno = EINVAL, -1;
  // malloc must not go on into a closed region.
  Vmalloc_t* expected = vm;
  __atomic_compare_exchange_n(&Vmregion, &expected, Vmheap, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  unlink_open(vm);
  if (vm->kind == Kind::kDebug) {
    if (vm->debug->debugging()) vm->debug->check_everything();
    except(vm, VM_CLOSE, nullptr);
    vm->debug->stop();
  }
  if (books_in_region(vm) && vm->meth->id == VM_MTDEBUG) (void)vm->region->check_objects();
  vm->region.reset();  // says VM_CLOSE
  delete vm;
  return 0;
}

void* vmalloc(Vmalloc_t* vm, size_t size) {
  return alloc_in(vm, size, 0, __builtin_return_address(0), nullptr, 0, __builtin_dwarf_cfa());
}

void* vmalign(Vmalloc_t* vm, size_t size, size_t align) {
  return alloc_in(vm, size, align, __builtin_return_address(0));
}

void* vmallocnear(Vmalloc_t* vm, size_t size, void* hint, size_t near_bytes) {
  return alloc_in(vm, size, 0, __builtin_return_address(0), hint, near_bytes == 0 ? 4096 : near_bytes);
}

int vmfree(Vmalloc_t* vm, void* data) { return free_at(vm, data, __builtin_return_address(0)); }

void* vmresize(Vmalloc_t* vm, void* data, size_t size, int type) {
  return resize_at(vm, data, size, type, __builtin_return_address(0));
}

static int free_at(Vmalloc_t* vm, void* data, const void* pc) {
  if (vm == nullptr) return errno = EINVAL, -1;
  if (data == nullptr) return 0;
  DebugSite site = site_of(pc);
  memd::region::CallSiteScope at(site);
  switch (vm->kind) {
    case Kind::kHeap:
      std::free(data);
      return 0;
    case Kind::kDebug:
      return vm->debug->free(data, site) ? 0 : -1;
    case Kind::kRegion:
      break;
  }
  // Vmlast knows only its most recent block: any other is -1 (and waits
  // for vmclear). A traced free needs the block's size for its line, which
  // goes out before the block can be handed out again.
  if (vm->meth->id == VM_MTLAST || traced(vm)) {
    size_t size = vm->region->size(data);
    if (size != 0 && traced(vm)) trace(vm, data, nullptr, size, site);
    vm->region->free(data);  // a bad one is refused and reported; exceptf hears of it
    return size != 0 ? 0 : -1;
  }
  // Else the region's own check answers: it refuses a bad free (and says
  // VM_BADADDR, which the event handler notes for this thread).
  tl_refused = nullptr;
  vm->region->free(data);
  return tl_refused == data ? -1 : 0;
}

static void* resize_at(Vmalloc_t* vm, void* data, size_t size, int type, const void* pc) {
  if (vm == nullptr) return fail(EINVAL);
  if (data == nullptr) return alloc_in(vm, size, 0, pc);
  if (size == 0) {
    free_at(vm, data, pc);
    return nullptr;
  }
  if (vm->kind == Kind::kHeap) {
    if ((type & VM_RSMOVE) == 0) return size <= malloc_usable_size(data) ? data : fail(ENOMEM);
    size_t old = malloc_usable_size(data);
    void* q = std::realloc(data, size);
    if (q != nullptr && (type & VM_RSCLEAR) != 0 && size > old) std::memset(static_cast<char*>(q) + old, 0, size - old);
    return q;
  }
  DebugSite site = site_of(pc);
  memd::region::CallSiteScope at(site);
  if (vm->kind == Kind::kDebug || books_in_region(vm)) {
    if ((type & VM_RSMOVE) == 0) return fail(ENOMEM);  // a debug block always moves
    size_t old = vm->kind == Kind::kDebug ? 0 : vm->region->size(data);
    // Reports a bad block; the private method traces itself.
    void* q = vm->kind == Kind::kDebug ? vm->debug->resize(data, size, site, &old) : vm->region->resize(data, size);
    if (q != nullptr && books_in_region(vm) && traced(vm)) trace(vm, data, q, size, site);
    if (q != nullptr && (type & VM_RSCLEAR) != 0 && size > old) std::memset(static_cast<char*>(q) + old, 0, size - old);
    return q;
  }
  bool last = vm->meth->id == VM_MTLAST;
  // Vmlast knows the size of its most recent block only; a resize of any
  // other moves it (the region copies what it can), and its old size is
  // unknown here, so VM_RSCLEAR clears nothing of it.
  size_t old = vm->region->size(data);
  if (old == 0 && !last) return vm->region->resize(data, size);  // reported and refused
  void* q;
  if (size <= old && !last) {
    q = data;  // fits where it is
  } else if ((type & VM_RSMOVE) == 0 && !last) {
    return fail(ENOMEM);
  } else if (traced(vm) && !last) {
    // Moved by hand, so that the line is written before the old block can
    // be handed out again.
    q = vm->region->alloc(size);
    if (q == nullptr) return nullptr;
    std::memcpy(q, data, old < size ? old : size);
    trace(vm, data, q, size, site);
    vm->region->free(data);
    if ((type & VM_RSCLEAR) != 0 && size > old) std::memset(static_cast<char*>(q) + old, 0, size - old);
    return q;
  } else {
    q = vm->region->resize(data, size);
    if (q == nullptr) return nullptr;
    if (q != data && (type & VM_RSMOVE) == 0) {
      vm->region->free(q);  // Vmlast moved a block that may not move: undo (q is its most recent)
      return fail(ENOMEM);
    }
  }
  if (traced(vm)) trace(vm, data, q, size, site);
  if ((type & VM_RSCLEAR) != 0 && size > old) std::memset(static_cast<char*>(q) + old, 0, size - old);
  return q;
}

int vmclear(Vmalloc_t* vm) {
  if (vm == nullptr || vm == Vmheap) return errno = EINVAL, -1;
  if (vm->kind == Kind::kDebug) {
    vm->debug->clear();
    return 0;
  }
  if (vm->meth->id != VM_MTBEST) {
    absl::Status s = vm->region->clear();
    return s.ok() ? 0 : (errno = errno_of(s), -1);
  }
  // A best heap frees everything only as a new heap: possible for a
  // private region (no one else holds its blocks), not for a named one.
  if (disc_of(vm)->kind != VM_DCPRIVATE) return errno = EPROTO, -1;
  vm->region.reset();
  return open_region(vm) ? 0 : -1;
}

int vmcompact(Vmalloc_t* vm) {
  if (vm == nullptr) return errno = EINVAL, -1;
  switch (vm->kind) {
    case Kind::kHeap: malloc_trim(0); break;
    case Kind::kRegion: vm->region->compact(); break;
    case Kind::kDebug: vm->debug->trim(); break;
  }
  return 0;
}

int vmstat(Vmalloc_t* vm, Vmstat_t* st) {
  if (vm == nullptr || st == nullptr) return errno = EINVAL, -1;
  *st = Vmstat_t{};
  st->n_seg = 1;
  st->mode = vm->flags | (vm->meth->id << 8);
  if (vm->kind == Kind::kHeap) {
    struct mallinfo2 mi = mallinfo2();
    st->s_busy = mi.uordblks;
    st->s_free = mi.fordblks;
    st->extent = mi.arena + mi.hblkhd;
    return 0;
  }
  if (vm->kind == Kind::kDebug) {
    DebugMethod::Stats s = vm->debug->stat();
    st->n_busy = static_cast<int>(s.live_blocks);
    st->s_busy = s.live_bytes;
    st->n_free = static_cast<int>(s.quarantined_blocks);
    st->extent = s.heap.pages_in_use * 4096;
    return 0;
  }
  memd::heap::RegionStats rs = vm->region->stat();
  st->extent = rs.pages_in_use * 4096;
  if (vm->meth->id == VM_MTBEST) {
    st->n_busy = static_cast<int>(rs.busy_objects);
    st->s_busy = rs.busy_bytes;
    st->n_free = static_cast<int>(rs.free_objects);
    st->s_free = rs.free_bytes;
    return 0;
  }
  memd::MethodStats ms = vm->region->method_stats();
  if (books_in_region(vm)) {
    st->n_busy = static_cast<int>(ms.live_objects);
    st->s_busy = ms.used_bytes;
  } else if (vm->meth->id == VM_MTPOOL) {
    st->n_busy = static_cast<int>(ms.live_objects);
    st->s_busy = ms.live_objects * ms.object_size;
    st->n_free = static_cast<int>(ms.capacity - ms.live_objects);
    st->s_free = (ms.capacity - ms.live_objects) * ms.object_size;
  } else {
    st->s_busy = ms.used_bytes;
    st->s_free = ms.chunk_bytes > ms.used_bytes ? ms.chunk_bytes - ms.used_bytes : 0;
  }
  return 0;
}

long vmaddr(Vmalloc_t* vm, void* addr) {
  if (vm == nullptr || vm == Vmheap) return errno = EINVAL, -1;
  void* start = vm->kind == Kind::kDebug ? vm->debug->block_of(addr) : vm->region->addr(addr);
  if (start == nullptr) return -1;
  return static_cast<char*>(addr) - static_cast<char*>(start);
}

long vmsize(Vmalloc_t* vm, void* data) {
  if (vm == nullptr) return errno = EINVAL, -1;
  if (vm->kind == Kind::kDebug) {
    // No report: vmsize is a question, not a use of the block.
    size_t n = vm->debug->size(data, nullptr);
    return n != 0 ? static_cast<long>(n) : -1;
  }
  size_t n = live_size(vm, data);
  return n != 0 ? static_cast<long>(n) : -1;
}

Vmalloc_t* vmregion(void* addr) {
  Locked locked;
  for (Vmalloc_t* vm = open_regions; vm != nullptr; vm = vm->next) {
    if (vm->kind == Kind::kRegion ? vm->region->contains(addr) : vm->debug->contains(addr)) return vm;
  }
  return nullptr;
}

long vmoffset(Vmalloc_t* vm, void* addr) {
  if (vm == nullptr || vm->kind != Kind::kRegion) return errno = EINVAL, -1;
  if (!vm->region->contains(addr)) return -1;
  return static_cast<long>(vm->region->offset_of(addr));
}

void* vmpointer(Vmalloc_t* vm, long offset) {
  if (vm == nullptr || vm->kind != Kind::kRegion || offset < 0) return fail(EINVAL);
  void* p = vm->region->at(static_cast<uint64_t>(offset));
  return vm->region->contains(p) ? p : nullptr;
}

int vmdbcheck(Vmalloc_t* vm) {
  if (vm == nullptr || vm->meth->id != VM_MTDEBUG) return errno = EINVAL, -1;
  return vm->kind == Kind::kDebug ? vm->debug->check_all() : vm->region->check_objects();
}

int vmdbwatch(Vmalloc_t* vm, void* addr) {
  if (vm == nullptr || vm->meth->id != VM_MTDEBUG) return errno = EINVAL, -1;
  bool added = vm->kind == Kind::kDebug ? vm->debug->watch(addr) : vm->region->watch(addr);
  return added ? 0 : (errno = ENOSPC, -1);
}

int vmprofile(Vmalloc_t* vm, int fd) {
  if (vm != nullptr) {
    if (books_in_region(vm)) {
      absl::Status s = vm->region->write_profile(fd);
      return s.ok() ? 0 : (errno = errno_of(s), -1);
    }
    if (vm->kind != Kind::kDebug || !vm->debug->profiling()) return errno = EINVAL, -1;
    vm->debug->write_profile(fd);
    return 0;
  }
  Locked locked;
  for (Vmalloc_t* r = open_regions; r != nullptr; r = r->next) {
    if (r->kind == Kind::kDebug && r->debug->profiling()) r->debug->write_profile(fd);
    if (books_in_region(r) && r->meth->id == VM_MTPROFILE) (void)r->region->write_profile(fd);
  }
  return 0;
}

int vmtrace(int fd) {
  int before = trace_fd.exchange(fd);
  Locked locked;
  for (Vmalloc_t* r = open_regions; r != nullptr; r = r->next) {
    if (r->kind == Kind::kDebug && (r->flags & VM_TRACE) != 0) r->debug->set_trace_fd(fd);
  }
  return before;
}

}  // extern "C"
