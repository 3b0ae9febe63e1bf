#include "client/shim/daemon_mode.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "region/chain_pools.h"
#include "region/options.h"
#include "client/process_heap.h"
#include "client/shim/debug_mode.h"
#include "client/telemetry/sampler.h"

#define MEMD_EXPORT extern "C" __attribute__((visibility("default")))

namespace memd::client::shim {

std::atomic<const memd_daemon_heap*> redirect_heap{nullptr};
std::atomic<bool> alloc_detour{false};
__thread int tl_private __attribute__((tls_model("initial-exec"))) = 0;
bool forked_child = false;

namespace {

memd_daemon_heap heap_storage;

void enter_private() { ++tl_private; }
void leave_private() { --tl_private; }

void say(const char* a, const char* b, const char* c) {
  char line[512];
  int n = std::snprintf(line, sizeof line, "memd: %s%s%s\n", a, b, c);
  if (n > 0) (void)!write(STDERR_FILENO, line, static_cast<size_t>(std::min(n, int(sizeof line) - 1)));
}

// The child is one thread: the forking one. From here on it, and every
// thread it makes, uses the process heap.
void child_after_fork() {
  tl_private = 1;
  // A grandchild inherits its parent's private mapping as fork does any.
  if (forked_child) return;
  forked_child = true;
  // The heap the parent shares with other processes must not be written by
  // the child as if it were the child's own copy of memory.
  if (heap_storage.fork_child() != 0) say("fork: cannot make the region private in the child; ", "its writes to inherited objects reach the parent", "");
}

// The loader gives a library loaded by dlopen (the link, and what it
// brings: the C++ runtime, gRPC) its thread-local storage in each thread
// at the thread's first use, with malloc. Made now, while private, the
// main thread's blocks are not the program's allocations in its region (a
// C program's profile would show the loader's block; a C++ program has its
// runtime from the start, its storage in the thread's own).
extern "C" void* __tls_get_addr(void* index);
int make_module_storage(struct dl_phdr_info* info, size_t, void*) {
  if (info->dlpi_tls_modid != 0 && info->dlpi_tls_data == nullptr) {
    unsigned long index[2] = {info->dlpi_tls_modid, 0};  // the ABI's tls_index: module, offset
    (void)__tls_get_addr(index);
  }
  return 0;
}
void make_thread_storage_now() { dl_iterate_phdr(make_module_storage, nullptr); }

// Where the link library is: beside this one, unless MEMD_DAEMON_LINK says.
bool link_path(char* out, size_t size) {
  if (const char* p = std::getenv("MEMD_DAEMON_LINK"); p != nullptr && *p != '\0') {
    std::snprintf(out, size, "%s", p);
    return true;
  }
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&link_path), &info) == 0 || info.dli_fname == nullptr) return false;
  const char* slash = std::strrchr(info.dli_fname, '/');
  int dir = slash != nullptr ? static_cast<int>(slash - info.dli_fname) : 0;
  std::snprintf(out, size, "%.*s%slibmemd-daemon-link.so", dir, info.dli_fname, slash != nullptr ? "/" : "");
  return true;
}

// --- telemetry of the process heap (this library's copy of the sampler) ---

size_t drain_events(memd_sample_event* out, size_t max) { return telemetry::drain_sample_events(out, max); }
void process_heap_counters(void* snapshot) {
  if (const region::ArenaHandle* a = process_arena_if_created()) {
    a->arena->sum_counters(static_cast<heap::CounterSnapshot*>(snapshot));
  }
}
void sampler_counts(uint64_t* taken, uint64_t* dropped) {
  telemetry::SamplerCounts c = telemetry::sampler_counts();
  *taken = c.taken;
  *dropped = c.dropped;
}
int chain_pools(void* stats, void* records, size_t max, size_t* count) {
  if (!region::chain_pools_enabled()) return 0;
  *static_cast<region::ChainPoolStats*>(stats) = region::chain_pool_stats();
  *count = region::chain_pools_list(static_cast<region::ChainRecord*>(records), max);
  return 1;
}
const memd_shim_telemetry shim_telemetry{drain_events, process_heap_counters, sampler_counts, chain_pools};

// MEMD_TELEMETRY (default: on in daemon mode, off otherwise) and
// MEMD_SAMPLE_BYTES (0: count, do not sample).
bool telemetry_wanted(const region::TelemetrySettings& env, bool daemon_mode) {
  return env.enabled < 0 ? daemon_mode : env.enabled != 0;
}
uint64_t sample_bytes(const region::TelemetrySettings& env) {
  return env.sample_bytes >= 0 ? static_cast<uint64_t>(env.sample_bytes) : telemetry::kDefaultSampleBytes;
}

void* load_link(char* error, size_t error_size) {
  char path[1024];
  if (!link_path(path, sizeof path)) {
    std::snprintf(error, error_size, "cannot find libmemd-daemon-link.so");
    return nullptr;
  }
  // Lazy: binding every function of gRPC, protobuf and absl up front took
  // about 9 of a process's 23 ms of start-up with MEMD_TELEMETRY=1. Function
  // bindings are made on first call and never allocate (only lookups of
  // unique data symbols can, and data is bound here either way).
  void* lib = dlopen(path, RTLD_LAZY | RTLD_LOCAL);
  if (lib == nullptr) std::snprintf(error, error_size, "%s", dlerror());
  return lib;
}

// --- a region of the debug or profile method: each call names its site ---

RegionMethodWish wish;
memd_daemon_heap site_calls;

void give_site() {
  heap::DebugSite s = program_call_site();
  heap_storage.set_site(s.file, s.line, s.pc);
}
void* site_alloc(size_t n) { return give_site(), heap_storage.alloc(n); }
void* site_alloc_aligned(size_t n, size_t align) { return give_site(), heap_storage.alloc_aligned(n, align); }
void* site_alloc_zeroed(size_t n) { return give_site(), heap_storage.alloc_zeroed(n); }
void* site_resize(void* p, size_t n) { return give_site(), heap_storage.resize(p, n); }
int site_free(void* p) { return give_site(), heap_storage.free(p); }

// At exit, as the private debug method does: the objects never freed are
// checked (a leaked object's overwrite is otherwise never seen) and the
// profile written; both are the region's, every process's so far.
__attribute__((destructor)) void region_method_at_exit() {
  if (redirect_heap.load(std::memory_order_acquire) != &site_calls || forked_child) return;
  // What the summary allocates is not the program's: the process heap's.
  enter_private();
  if (wish.profile_fd >= 0) heap_storage.write_profile(wish.profile_fd);
  if (wish.method == 4) (void)heap_storage.check_objects();
  leave_private();
}

// MEMD_TELEMETRY=1 without a region: the process heap's telemetry only.
void start_reporting(memd_daemon_link_hooks* hooks) {
  char error[512] = "";
  enter_private();
  int rc = -1;
  if (void* lib = load_link(error, sizeof error)) {
    if (auto report = reinterpret_cast<memd_daemon_link_report_fn>(dlsym(lib, "memd_daemon_link_report"))) {
      rc = report(hooks, error, sizeof error);
    } else {
      std::snprintf(error, sizeof error, "the link has no memd_daemon_link_report");
    }
  }
  leave_private();
  if (rc != 0) say("MEMD_TELEMETRY=1: not reporting: ", error, "");
}

// Before main: a program's heap is in the region from its first line (what
// the loader and libc allocated earlier stays in the process heap).
__attribute__((constructor)) void start_daemon_mode() {
  const char* region = std::getenv("MEMD_REGION");
  bool daemon_mode = region != nullptr && *region != '\0';
  region::TelemetrySettings env = region::telemetry_settings();
  bool report = telemetry_wanted(env, daemon_mode);
  memd_daemon_link_hooks hooks{enter_private, leave_private, report ? &shim_telemetry : nullptr, 0, 0, 0, nullptr, 0};
  if (report) telemetry::enable_sampling(sample_bytes(env));
  if (!daemon_mode) {
    if (const memd_daemon_heap* debug = debug_heap_if_wanted()) set_redirect_heap(debug);
    if (report) start_reporting(&hooks);
    return;
  }
  // VMDEBUG, VMPROFILE, VMETHOD and MEMD_METHOD ask the region for its method.
  wish = region_method_wish();
  if (wish.trace) say("VMTRACE and MEMD_TRACE are not applied with MEMD_REGION: ", "no trace is written", "");
  hooks.method = wish.method;
  hooks.debug_check = wish.check ? 1 : 0;
  hooks.debug_abort = wish.abort ? 1 : 0;
  hooks.watch = wish.watch;
  hooks.watches = wish.watches;
  bool required = std::getenv("MEMD_REGION_REQUIRED") != nullptr;
  enter_private();
  char error[512] = "";
  int rc = -1;
  if (void* lib = load_link(error, sizeof error); lib == nullptr) {
  } else if (auto open = reinterpret_cast<memd_daemon_link_open_fn>(dlsym(lib, "memd_daemon_link_open"));
             open == nullptr) {
    std::snprintf(error, sizeof error, "the link has no memd_daemon_link_open");
  } else {
    rc = open(region, &hooks, &heap_storage, error, sizeof error);
  }
  if (rc == 0) make_thread_storage_now();
  leave_private();
  if (rc != 0) {
    char line[700];
    std::snprintf(line, sizeof line, "MEMD_REGION=%s%s%s", region, required ? ": " : " not used: ", error);
    say(line, required ? "" : " (the process heap is used instead)", "");
    if (required) std::abort();
    return;
  }
  pthread_atfork(nullptr, nullptr, child_after_fork);
  if (heap_storage.set_site != nullptr) {
    site_calls = heap_storage;
    site_calls.alloc = site_alloc;
    site_calls.alloc_aligned = site_alloc_aligned;
    site_calls.alloc_zeroed = site_alloc_zeroed;
    site_calls.resize = site_resize;
    site_calls.free = site_free;
    set_redirect_heap(&site_calls);
    return;
  }
  set_redirect_heap(&heap_storage);
}

struct ThreadStart {
  void* (*fn)(void*);
  void* arg;
};

void* start_private(void* p) {
  ThreadStart s = *static_cast<ThreadStart*>(p);
  delete static_cast<ThreadStart*>(p);
  tl_private = 1;  // for the thread's whole life
  return s.fn(s.arg);
}

}  // namespace

bool free_if_region(void* p) {
  const memd_daemon_heap* h = redirect_heap.load(std::memory_order_acquire);
  if (h == nullptr || h->contains(p) == 0) return false;
  if (!forked_child) h->free(p);
  return true;
}

}  // namespace memd::client::shim

using memd::client::shim::tl_private;

// Threads made while the creating thread may not use the region (gRPC's, in
// daemon mode) may not either.
MEMD_EXPORT int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*fn)(void*), void* arg) {
  using Create = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  // Looked up once; two first calls at once find the same function. (No
  // function-local static: its guard is C++ runtime the shim leaves out.)
  static std::atomic<Create> found{nullptr};
  Create real = found.load(std::memory_order_acquire);
  if (real == nullptr) {
    real = reinterpret_cast<Create>(dlsym(RTLD_NEXT, "pthread_create"));
    found.store(real, std::memory_order_release);
  }
  if (tl_private == 0) return real(thread, attr, fn, arg);
  auto* start = new (std::nothrow) memd::client::shim::ThreadStart{fn, arg};
  if (start == nullptr) return EAGAIN;
  int rc = real(thread, attr, memd::client::shim::start_private, start);
  if (rc != 0) delete start;
  return rc;
}
