#include "client/shim/debug_mode.h"

#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "client/debug_method.h"
#include "client/frame_pointers.h"
#include "region/profile_sites.h"
#include "client/shim/bootstrap_heap.h"
#include "region/diag.h"

#define MEMD_EXPORT extern "C" __attribute__((visibility("default")))

namespace memd::client::shim {
namespace {

using heap::DebugSite;

// The settings as the environment gives them: the method's, and where the
// profile goes at exit.
struct Settings : DebugSettings {
  int profile_fd = -1;
};

constinit DebugMethod method;
constinit region::ProfileSites profile;  // with Settings::profile, under the method's lock
constinit memd_daemon_heap calls{};
constinit int profile_fd = -1;

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

// The first return address outside this library, by frame pointers
// (client/frame_pointers.h). Every frame from here to the program's call is
// this library's own, built with them, so the walk is exact, where libgcc's
// DWARF unwind cost microseconds at every call (half of a Python run's time
// under VMDEBUG). 0 where the walk ends first: no site.
__attribute__((noinline, no_sanitize("address", "thread"))) uintptr_t first_return_outside(Span self) {
  constexpr int kMaxFrames = 12;
  auto* fp = static_cast<uintptr_t*>(__builtin_frame_address(0));
  for (int i = 0; i < kMaxFrames && fp != nullptr; ++i) {
    uintptr_t ra = fp[1];
    if (ra == 0) return 0;
    if (ra < self.start || ra >= self.end) return ra;
    fp = caller_frame(fp);
  }
  return 0;
}

// The first return address outside this library: the program's call.
const void* caller_pc() {
  // Found once; two first calls at once find the same span. (No
  // function-local static: its guard is C++ runtime the shim leaves out.)
  // The end is stored last and read first: an end seen set has its start.
  static std::atomic<uintptr_t> self_start{0}, self_end{0};
  Span self;
  self.end = self_end.load(std::memory_order_acquire);
  self.start = self_start.load(std::memory_order_relaxed);
  if (self.end == 0) {
    dl_iterate_phdr(find_self, &self);
    self_start.store(self.start, std::memory_order_relaxed);
    self_end.store(self.end, std::memory_order_release);
  }
  return reinterpret_cast<const void*>(first_return_outside(self));
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

// --- the calls the shim redirects to ---

void* debug_alloc(size_t size) {
  Reentry r;
  if (!r.entered) return bootstrap_alloc(size, 0);
  return method.alloc(size, 0, false, take_site());
}

void* debug_alloc_aligned(size_t size, size_t align) {
  Reentry r;
  if (!r.entered) return bootstrap_alloc(size, align);
  return method.alloc(size, align, false, take_site());
}

void* debug_alloc_zeroed(size_t size) {
  Reentry r;
  if (!r.entered) return bootstrap_alloc(size, 0);
  return method.alloc(size, 0, true, take_site());
}

int debug_free(void* p) {
  Reentry r;
  if (!r.entered) return 1;  // the method's own libraries free nothing of its heap
  method.free(p, take_site());
  return 1;
}

void* debug_resize(void* p, size_t size) {
  Reentry r;
  if (!r.entered) return nullptr;
  return method.resize(p, size, take_site());
}

size_t debug_usable_size(const void* p) {
  Reentry r;
  DebugSite site = r.entered ? take_site() : DebugSite{};
  return method.size(p, &site);
}

// Every pointer the shim's own heaps do not hold is the method's to judge:
// a free of anything else is an "unallocated block" report, not a crash.
int debug_contains(const void*) { return 1; }

void debug_trim() { method.trim(); }

int debug_fork_child() { return 0; }

void lock_for_fork() { method.lock(); }
void unlock_after_fork() { method.unlock(); }

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
    } else if (n > 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X') && s->watches < DebugSettings::kMaxWatches) {
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
  // VMETHOD=Vmdebug, Vmprofile or Vmbest: the paper's name for the choice.
  if (const char* v = std::getenv("VMETHOD"); v != nullptr && *v != '\0') {
    const char* name = std::strncmp(v, "Vm", 2) == 0 ? v + 2 : v;
    if (std::strcmp(name, "debug") == 0) {
      s->debug = true;
    } else if (std::strcmp(name, "profile") == 0) {
      if (s->profile_fd < 0) s->profile_fd = STDERR_FILENO;
    } else if (std::strcmp(name, "best") != 0) {
      region::report_bad_setting("VMETHOD", v, "Vmbest, Vmdebug or Vmprofile (the methods the malloc shim runs)");
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
  if (!method.start(s, "(process)", s.profile_fd >= 0 ? &profile : nullptr)) {
    const char msg[] = "memd: the debug method cannot create its heap; it is off\n";
    (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
    return false;
  }
  profile_fd = s.profile_fd;
  calls = memd_daemon_heap{debug_alloc, debug_alloc_aligned, debug_alloc_zeroed, debug_resize, debug_free,
                           debug_usable_size, debug_contains, debug_trim, debug_fork_child, nullptr, nullptr, nullptr};
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
  if (profile_fd >= 0) method.write_profile(profile_fd);
  if (method.debugging()) method.check_everything();
}

}  // namespace

RegionMethodWish region_method_wish() {
  Settings s;
  RegionMethodWish w;
  (void)wanted(&s);
  w.method = s.debug ? 4 : s.profile_fd >= 0 ? 5 : 0;  // MEMD_DEBUG, MEMD_PROFILE
  w.check = s.check, w.abort = s.abort;
  w.watches = s.watches;
  for (int i = 0; i < s.watches; ++i) w.watch[i] = s.watch[i];
  w.profile_fd = s.profile_fd;
  w.trace = s.trace_fd >= 0;
  return w;
}

heap::DebugSite program_call_site() { return take_site(); }

// start() runs once, under pthread_once (not a function-local static,
// whose guard is C++ runtime the shim leaves out).
pthread_once_t start_once = PTHREAD_ONCE_INIT;
void start_once_only() { started.store(start(), std::memory_order_release); }

const memd_daemon_heap* debug_heap_if_wanted() {
  pthread_once(&start_once, start_once_only);
  return started.load(std::memory_order_acquire) ? &calls : nullptr;
}

}  // namespace memd::client::shim

// Records the site of the calling thread's next allocation call
// (client/memd_debug.h).
MEMD_EXPORT void memd_debug_site(const char* file, int line) {
  memd::client::shim::tl_site_file = file;
  memd::client::shim::tl_site_line = line;
}
