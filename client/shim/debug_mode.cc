#include "client/shim/debug_mode.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <ctime>
#include <link.h>
#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/debugging/stacktrace.h"
#include "client/shim/bootstrap_heap.h"
#include "client/shim/profile_sites.h"
#include "client/shim/site_text.h"
#include "heap/debug_block.h"
#include "heap/inspect.h"
#include "heap/region_format.h"
#include "heap/thread_heap.h"
#include "region/arena.h"
#include "region/diag.h"
#include "region/options.h"
#include "region/report_line.h"
#include "region/thread_heaps.h"

#define MEMD_EXPORT extern "C" __attribute__((visibility("default")))

namespace memd::client::shim {
namespace {

using heap::DebugHeader;
using heap::DebugSite;
using heap::DebugState;
using region::Line;

constexpr int kMaxWatches = 16;
constexpr size_t kQuarantineBlocks = 4096;
constexpr size_t kQuarantineBytes = size_t{64} << 20;
// A block's profile site (index + 1, 0: none) in its header's flags, above
// the debug method's bits.
constexpr unsigned kProfileShift = 8;

struct Settings {
  bool debug = false;     // guards, quarantine, reports (VMDEBUG, MEMD_METHOD=debug)
  int profile_fd = -1;    // where the profile summary goes at exit; -1: no profile
  int trace_fd = -1;      // where each call's trace line goes; -1: no trace
  bool check = false;
  bool abort = false;
  uintptr_t watch[kMaxWatches] = {};
  int watches = 0;
};

// One heap of debug blocks per process. Every call that reads or changes
// it (the heap under it included) holds `lock`: the checks walk blocks
// other threads would otherwise be changing, and the method is for finding
// bugs, not for speed.
struct DebugMethod {
  region::ArenaHandle arena;
  uint64_t secret = 0;
  Settings settings;
  pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  DebugHeader* live = nullptr;  // the live blocks, newest first
  void* quarantine[kQuarantineBlocks] = {};
  size_t quarantine_first = 0, quarantine_count = 0, quarantine_bytes = 0;
  uint64_t trace_start_us = 0;
};
constinit DebugMethod method;
constinit ProfileSites profile;  // with Settings::profile_fd, under method.lock
constinit memd_daemon_heap calls{};

// Sites: what the program recorded for its next call (memd_debug.h), and
// whether this thread is inside the method already (a library the method
// calls that allocates gets the bootstrap heap).
__thread const char* tl_site_file __attribute__((tls_model("initial-exec")));
__thread int tl_site_line __attribute__((tls_model("initial-exec")));
__thread bool tl_in_method __attribute__((tls_model("initial-exec")));

struct Reentry {
  bool entered;
  Reentry() : entered(!tl_in_method) { tl_in_method = true; }
  ~Reentry() {
    if (entered) tl_in_method = false;
  }
};

struct Locked {
  Locked() { pthread_mutex_lock(&method.lock); }
  ~Locked() { pthread_mutex_unlock(&method.lock); }
};

// This library's own code, found once: a frame inside it is the shim's,
// not the program's.
struct Span {
  uintptr_t start = 0, end = 0;
};
int find_self(struct dl_phdr_info* info, size_t, void* out) {
  auto* span = static_cast<Span*>(out);
  uintptr_t self = reinterpret_cast<uintptr_t>(&find_self);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    if (self >= start && self < start + ph.p_memsz) {
      *span = {start, start + ph.p_memsz};
      return 1;
    }
  }
  return 0;
}

// The first return address outside this library: the program's call.
const void* caller_pc() {
  static Span self = [] {
    Span s;
    dl_iterate_phdr(find_self, &s);
    return s;
  }();
  void* frames[12];
  int depth = absl::GetStackTrace(frames, 12, 0);
  for (int i = 0; i < depth; ++i) {
    uintptr_t pc = reinterpret_cast<uintptr_t>(frames[i]);
    if (pc < self.start || pc >= self.end) return frames[i];
  }
  return nullptr;
}

DebugSite take_site() {
  DebugSite s;
  if (tl_site_file != nullptr) {
    s.file = tl_site_file;
    s.line = static_cast<uint32_t>(tl_site_line);
    tl_site_file = nullptr;
  } else {
    s.pc = caller_pc();
  }
  return s;
}

// "memd: <kind>:region=(process):block=0x...:"
Line start_report(const char* kind, const void* block) {
  Line l;
  l.add("memd: ");
  l.add(kind);
  l.add(":region=(process):block=");
  l.add_hex(block);
  l.add(":");
  return l;
}

void finish_error(Line& l) {
  l.add("\n");
  l.write_out();
  if (method.settings.abort) std::abort();
}

void report_corrupted(const void* user, int64_t bad_byte, const char* how, const DebugSite* detected) {
  Line l = start_report("corrupted data", user);
  l.add("bad byte at=");
  l.add_signed(bad_byte);
  l.add(":");
  if (how != nullptr) {
    l.add(how);
    l.add(":");
  }
  l.add("allocated at=");
  add_site(l, heap::debug_header(user)->site);
  l.add(":");
  if (detected != nullptr) {
    l.add("detected at=");
    add_site(l, *detected);
    l.add(":");
  }
  finish_error(l);
}

void report_call_error(const char* call, const void* p, const char* what, const DebugSite& detected) {
  Line l = start_report(call, p);
  l.add(what);
  l.add(":detected at=");
  add_site(l, detected);
  l.add(":");
  finish_error(l);
}

bool watched(const void* p) {
  for (int i = 0; i < method.settings.watches; ++i) {
    if (method.settings.watch[i] == reinterpret_cast<uintptr_t>(p)) return true;
  }
  return false;
}

void alert(const void* user, const char* what, const DebugSite& detected) {
  Line l = start_report("alert", user);
  l.add("size=");
  l.add_decimal(heap::debug_header(user)->size);
  l.add(":");
  l.add(what);
  l.add(":detected at=");
  add_site(l, detected);
  l.add(":\n");
  l.write_out();
}

// Reports a live block whose guards were overwritten, once.
void check_block_locked(void* user, const DebugSite* detected) {
  DebugHeader* h = heap::debug_header(user);
  int64_t bad;
  if ((h->flags & heap::kDebugReported) == 0 && heap::debug_find_overwrite(user, &bad)) {
    h->flags |= heap::kDebugReported;
    report_corrupted(user, bad, nullptr, detected);
  }
}

void* user_of(DebugHeader* h) { return reinterpret_cast<char*>(h) + heap::kDebugHeadBytes; }

void check_all_locked() {
  for (DebugHeader* h = method.live; h != nullptr; h = h->next) check_block_locked(user_of(h), nullptr);
}

// What p is: a live or freed debug block of this heap, or anything else.
DebugState classify_locked(const void* p) {
  const region::Arena* a = method.arena.arena;
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0 || !a->contains(p)) return DebugState::kNotABlock;
  const char* before = static_cast<const char*>(p) - 1;
  if (!a->contains(before)) return DebugState::kNotABlock;
  // Header and guard lie inside the raw object that holds the byte before
  // p; whether it is one of ours, live or freed, its state word says.
  const char* raw = static_cast<const char*>(heap::region_object_slot(a->region(), a->classes(), before));
  if (raw == nullptr || static_cast<const char*>(p) - heap::kDebugHeadBytes < raw) return DebugState::kNotABlock;
  return heap::debug_state(p, method.secret);
}

heap::ThreadHeap* thread_heap() {
  heap::ThreadHeap* h = region::thread_heap(method.arena);
  return h != nullptr ? h : method.arena.host->stranger();
}

void link_live_locked(DebugHeader* h) {
  h->prev = nullptr;
  h->next = method.live;
  if (method.live != nullptr) method.live->prev = h;
  method.live = h;
}

void unlink_live_locked(DebugHeader* h) {
  if (h->prev != nullptr) h->prev->next = h->next;
  else method.live = h->next;
  if (h->next != nullptr) h->next->prev = h->prev;
}

void release_raw_locked(void* user) {
  region::thread_heap_or_stranger(method.arena)->free(heap::debug_raw(user));
}

void evict_oldest_locked() {
  void* user = method.quarantine[method.quarantine_first];
  method.quarantine_first = (method.quarantine_first + 1) % kQuarantineBlocks;
  --method.quarantine_count;
  method.quarantine_bytes -= heap::debug_header(user)->size;
  int64_t bad;
  if (heap::debug_find_write_after_free(user, &bad)) report_corrupted(user, bad, "written after free", nullptr);
  heap::debug_header(user)->state = 0;
  release_raw_locked(user);
}

void quarantine_locked(void* user) {
  size_t bytes = heap::debug_header(user)->size;
  if (bytes > kQuarantineBytes) {
    release_raw_locked(user);
    return;
  }
  while (method.quarantine_count == kQuarantineBlocks ||
         (method.quarantine_count > 0 && method.quarantine_bytes + bytes > kQuarantineBytes)) {
    evict_oldest_locked();
  }
  method.quarantine[(method.quarantine_first + method.quarantine_count) % kQuarantineBlocks] = user;
  ++method.quarantine_count;
  method.quarantine_bytes += bytes;
}

const char* method_name() {
  return method.settings.debug ? "debug" : method.settings.profile_fd >= 0 ? "profile" : "best";
}

// One line per call that did something, written under the lock so that the
// file's order is the heap's (a free of an address before its next
// allocation): old:new:size:region:method:site:thread:microseconds:
// (docs/trace.md). `old` 0x0: an allocation; `new` 0x0: a free.
void trace_locked(const void* old, const void* now, uint64_t size, const DebugSite& site) {
  if (method.settings.trace_fd < 0) return;
  Line l;
  l.add_hex(old);
  l.add(":");
  l.add_hex(now);
  l.add(":");
  l.add_decimal(size);
  l.add(":(process):");
  l.add(method_name());
  l.add(":");
  add_site(l, site);
  l.add(":");
  l.add_decimal(static_cast<uint64_t>(gettid()));
  l.add(":");
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  uint64_t us = static_cast<uint64_t>(t.tv_sec) * 1000000 + static_cast<uint64_t>(t.tv_nsec) / 1000;
  l.add_decimal(us - method.trace_start_us);
  l.add(":\n");
  l.write_to(method.settings.trace_fd);
}

// `resized_from`: the block a resize moves from (traced as one line).
void* alloc_at(size_t size, size_t align, bool zero, const DebugSite& site, const void* resized_from = nullptr) {
  heap::ThreadHeap* h = thread_heap();  // attaching may allocate: not under the lock
  heap::DebugLayout layout;
  if (!heap::debug_layout(size, align, &layout)) {
    errno = ENOMEM;
    return nullptr;
  }
  void* user;
  {
    Locked locked;
    if (method.settings.check) check_all_locked();
    void* raw = layout.raw_align != 0 ? h->alloc_aligned(layout.raw_bytes, layout.raw_align) : h->alloc(layout.raw_bytes);
    if (raw == nullptr) {
      errno = ENOMEM;
      return nullptr;
    }
    user = heap::debug_format(raw, layout, size, site, method.secret);
    link_live_locked(heap::debug_header(user));
    if (method.settings.profile_fd >= 0) {
      uint32_t index = profile.index_of(site);
      heap::debug_header(user)->flags |= (index + 1) << kProfileShift;
      profile.allocated(index, size);
    }
    trace_locked(resized_from, user, size, site);
  }
  if (zero) std::memset(user, 0, size);
  if (watched(user)) alert(user, "just allocated", site);
  return user;
}

// free and resize: the block p names, checked; false (reported) if p is
// not a live block.
bool take_live_locked(const char* call, void* p, const DebugSite& site) {
  if (method.settings.check) check_all_locked();
  DebugState s = classify_locked(p);
  if (s != DebugState::kLive) {
    report_call_error(call, p, s == DebugState::kFreed ? "already freed" : "unallocated block", site);
    return false;
  }
  if (method.settings.debug) check_block_locked(p, &site);
  return true;
}

void free_live_locked(void* p) {
  DebugHeader* h = heap::debug_header(p);
  unlink_live_locked(h);
  if (uint32_t index = h->flags >> kProfileShift; index != 0) profile.freed(index - 1, h->size);
  if (method.settings.debug) {
    heap::debug_mark_freed(p, method.secret);
    quarantine_locked(p);
  } else {
    h->state = 0;
    release_raw_locked(p);
  }
}

// --- the calls the shim redirects to ---

void* debug_alloc(size_t size) {
  Reentry r;
  if (!r.entered) return bootstrap_alloc(size, 0);
  return alloc_at(size, 0, false, take_site());
}

void* debug_alloc_aligned(size_t size, size_t align) {
  Reentry r;
  if (!r.entered) return bootstrap_alloc(size, align);
  return alloc_at(size, align, false, take_site());
}

void* debug_alloc_zeroed(size_t size) {
  Reentry r;
  if (!r.entered) return bootstrap_alloc(size, 0);
  return alloc_at(size, 0, true, take_site());
}

int debug_free(void* p) {
  Reentry r;
  if (!r.entered) return 1;  // the method's own libraries free nothing of its heap
  DebugSite site = take_site();
  Locked locked;
  if (watched(p) && classify_locked(p) == DebugState::kLive) alert(p, "being freed", site);
  if (take_live_locked("free error", p, site)) {
    trace_locked(p, nullptr, heap::debug_header(p)->size, site);
    free_live_locked(p);
  }
  return 1;
}

void* debug_resize(void* p, size_t size) {
  Reentry r;
  if (!r.entered) return nullptr;
  DebugSite site = take_site();
  size_t old_size;
  {
    Locked locked;
    if (!take_live_locked("resize error", p, site)) {
      errno = EINVAL;
      return nullptr;
    }
    old_size = heap::debug_header(p)->size;
  }
  if (watched(p)) alert(p, "being resized", site);
  // Always moved: a stale pointer to the old place then reads the freed
  // pattern, and writing through it is reported.
  void* q = alloc_at(size, 0, false, site, p);
  if (q == nullptr) return nullptr;
  std::memcpy(q, p, old_size < size ? old_size : size);
  Locked locked;
  if (classify_locked(p) == DebugState::kLive) free_live_locked(p);
  return q;
}

size_t debug_usable_size(const void* p) {
  Reentry r;
  DebugSite site = r.entered ? take_site() : DebugSite{};
  Locked locked;
  DebugState s = classify_locked(p);
  if (s == DebugState::kLive) return heap::debug_header(p)->size;
  report_call_error("size error", p, s == DebugState::kFreed ? "already freed" : "unallocated block", site);
  return 0;
}

// Every pointer the shim's own heaps do not hold is the method's to judge:
// a free of anything else is an "unallocated block" report, not a crash.
int debug_contains(const void*) { return 1; }

void debug_trim() {
  Locked locked;
  method.arena.arena->purge_all();
}

int debug_fork_child() { return 0; }

void lock_for_fork() { pthread_mutex_lock(&method.lock); }
void unlock_after_fork() { pthread_mutex_unlock(&method.lock); }

// "0xd6e0,check,abort": fills `s`; false (reported) on a field it does not know.
bool parse_list(const char* name, const char* value, const char* list, Settings* s) {
  const char* p = list;
  while (*p != '\0') {
    const char* end = std::strchr(p, ',');
    size_t n = end != nullptr ? static_cast<size_t>(end - p) : std::strlen(p);
    if (n == 5 && std::strncmp(p, "check", 5) == 0) {
      s->check = true;
    } else if (n == 5 && std::strncmp(p, "abort", 5) == 0) {
      s->abort = true;
    } else if (n > 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X') && s->watches < kMaxWatches) {
      char* stop;
      uintptr_t a = std::strtoull(p, &stop, 16);
      if (stop != p + n) {
        region::report_bad_setting(name, value, "a comma list of 0x addresses, check and abort");
        return false;
      }
      s->watch[s->watches++] = a;
    } else if (n != 0) {
      region::report_bad_setting(name, value, "a comma list of 0x addresses, check and abort");
      return false;
    }
    p += n;
    if (*p == ',') ++p;
  }
  return true;
}

// Where the profile or the trace goes: a file appended to (created if need
// be); "" or "stderr": standard error. -1 (reported) if it cannot be opened.
int open_profile(const char* name, const char* path) {
  if (path == nullptr || *path == '\0' || std::strcmp(path, "stderr") == 0) return STDERR_FILENO;
  // Appended to, never truncated: the programs a traced shell script runs
  // each open it (one write per line keeps their lines whole).
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) region::report_bad_setting(name, path, "a file this process can write");
  return fd;
}

// VMDEBUG=1[,list] and VMPROFILE=file (the paper's), or MEMD_METHOD=debug
// (with MEMD_DEBUG=list) or MEMD_METHOD=profile (with MEMD_PROFILE=file).
bool wanted(Settings* s) {
  if (const char* v = std::getenv("VMDEBUG"); v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0) {
    const char* comma = std::strchr(v, ',');
    s->debug = parse_list("VMDEBUG", v, comma != nullptr ? comma + 1 : "", s);
  }
  if (const char* v = std::getenv("VMPROFILE"); v != nullptr && *v != '\0') {
    s->profile_fd = open_profile("VMPROFILE", v);
  }
  for (const char* name : {"VMTRACE", "MEMD_TRACE"}) {
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0' && s->trace_fd < 0) {
      s->trace_fd = open_profile(name, v);
    }
  }
  const char* m = std::getenv("MEMD_METHOD");
  if (m != nullptr && *m != '\0' && std::strcmp(m, "best") != 0) {
    if (std::strcmp(m, "debug") == 0) {
      const char* list = std::getenv("MEMD_DEBUG");
      s->debug = parse_list("MEMD_DEBUG", list != nullptr ? list : "", list != nullptr ? list : "", s);
    } else if (std::strcmp(m, "profile") == 0) {
      s->profile_fd = open_profile("MEMD_PROFILE", std::getenv("MEMD_PROFILE"));
    } else {
      region::report_bad_setting("MEMD_METHOD", m, "best, debug or profile (the methods the malloc shim runs)");
    }
  }
  return s->debug || s->profile_fd >= 0 || s->trace_fd >= 0;
}

bool start() {
  Settings s;
  if (!wanted(&s)) return false;
  region::Arena* arena = region::Arena::create(region::process_arena_options());
  region::ArenaHandle handle;
  if (arena == nullptr || !region::register_arena(arena, &handle)) {
    const char msg[] = "memd: the debug method cannot create its heap; it is off\n";
    (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
    if (arena != nullptr) region::Arena::destroy(arena);
    return false;
  }
  method.arena = handle;
  method.secret = heap::random_secret();
  method.settings = s;
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  method.trace_start_us = static_cast<uint64_t>(t.tv_sec) * 1000000 + static_cast<uint64_t>(t.tv_nsec) / 1000;
  calls = memd_daemon_heap{debug_alloc, debug_alloc_aligned, debug_alloc_zeroed, debug_resize, debug_free,
                           debug_usable_size, debug_contains, debug_trim, debug_fork_child};
  pthread_atfork(lock_for_fork, unlock_after_fork, unlock_after_fork);
  return true;
}

std::atomic<bool> started{false};

// At exit, the blocks never freed are checked too (a leaked block's
// overwrite is otherwise never seen), and the quarantine for writes after
// free.
__attribute__((destructor)) void check_at_exit() {
  if (!started.load(std::memory_order_acquire)) return;
  Reentry r;
  Locked locked;
  if (method.settings.profile_fd >= 0) {
    heap::RegionStats st = method.arena.arena->stat();
    profile.write_summary(method.settings.profile_fd, "(process)", uint64_t{st.pages_in_use} << heap::kPageShift);
  }
  if (!method.settings.debug) return;
  check_all_locked();
  for (size_t i = 0; i < method.quarantine_count; ++i) {
    void* user = method.quarantine[(method.quarantine_first + i) % kQuarantineBlocks];
    int64_t bad;
    if (heap::debug_find_write_after_free(user, &bad)) report_corrupted(user, bad, "written after free", nullptr);
  }
}

}  // namespace

const memd_daemon_heap* debug_heap_if_wanted() {
  static bool on = [] {
    bool ok = start();
    started.store(ok, std::memory_order_release);
    return ok;
  }();
  return on ? &calls : nullptr;
}

}  // namespace memd::client::shim

// Records the site of the calling thread's next allocation call
// (client/memd_debug.h).
MEMD_EXPORT void memd_debug_site(const char* file, int line) {
  memd::client::shim::tl_site_file = file;
  memd::client::shim::tl_site_line = line;
}
