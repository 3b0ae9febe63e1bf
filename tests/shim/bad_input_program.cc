// Bad input to the memd shim (run under LD_PRELOAD=libmemd-malloc.so; not
// linked to memd). check_bad_input.py runs it and reads its stderr.
//
//   bad_input_program              every case, then checks the heap still works
//   bad_input_program double-free  one double free (for MEMD_ABORT_ON_ERROR=1)
//
// Before each case the program writes "case <name> <call> <address>" to
// stderr; the checker expects exactly one `memd:` report, naming the call
// and the address, between that marker and the next one.
#include <dlfcn.h>
#include <malloc.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <set>
#include <thread>
#include <vector>

namespace {

int g_failures = 0;

void failed(const char* what) {
  ++g_failures;
  printf("FAIL: %s\n", what);
}

// Calls through volatile pointers: the compiler can neither see that the
// argument is bad (and warn or drop the call) nor elide malloc/free pairs.
void (*volatile g_free)(void*) = free;
void* (*volatile g_realloc)(void*, size_t) = realloc;
size_t (*volatile g_usable)(void*) = malloc_usable_size;
void (*volatile g_delete)(void*) noexcept = ::operator delete;

// The marker goes straight to fd 2 so it is ordered with the shim's reports
// (which use write(2) too).
void marker(const char* name, const char* call, const void* p) {
  char line[160];
  int n = snprintf(line, sizeof line, "case %s %s 0x%" PRIxPTR "\n", name, call, reinterpret_cast<uintptr_t>(p));
  if (write(STDERR_FILENO, line, n) != n) _exit(10);
}

void* filled_malloc(size_t n, int byte) {
  void* p = malloc(n);
  if (p == nullptr) _exit(11);
  memset(p, byte, n);
  return p;
}

bool intact(const void* p, size_t n, int byte) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != static_cast<unsigned char>(byte)) return false;
  }
  return true;
}

void free_of_stack() {
  char local[64];
  void* p = local + 16;
  marker("free-stack", "free", p);
  g_free(p);
  marker("delete-stack", "free", local);  // the shim names operator delete "free"
  g_delete(local);
}

// An interior pointer must be refused and the object left intact.
void free_interior(const char* name, size_t n, size_t offset) {
  void* p = filled_malloc(n, 0x11);
  char* inside = static_cast<char*>(p) + offset;
  marker(name, "free", inside);
  g_free(inside);
  if (!intact(p, n, 0x11)) failed("invalid free of an interior pointer damaged the object");
  g_free(p);  // the real free still works
}

void double_free(const char* name, size_t n) {
  void* p = filled_malloc(n, 0x22);
  g_free(p);
  marker(name, "free", p);
  g_free(p);
}

// The object belongs to a thread that has exited: both frees take the
// remote path, which must catch the second one too.
void double_free_remote(const char* name, size_t n) {
  void* p = nullptr;
  std::thread([&] { p = filled_malloc(n, 0x44); }).join();
  g_free(p);
  marker(name, "free", p);
  g_free(p);
}

// A thread that never allocated has no thread heap: its frees take the
// shim's slow path (the arena's stranger heap), which must report too.
void bad_frees_from_fresh_thread() {
  void* p = filled_malloc(64, 0x55);
  g_free(p);
  std::thread([p] {
    marker("double-free-fresh-thread", "free", p);
    g_free(p);
    char local[16];
    marker("free-stack-fresh-thread", "free", local);
    g_free(local);
  }).join();
}

void realloc_of_freed(const char* name, size_t n) {
  void* p = filled_malloc(n, 0x33);
  g_free(p);
  marker(name, "realloc", p);
  errno = 0;
  void* q = g_realloc(p, n * 2);
  if (q != nullptr || errno != EINVAL) failed("realloc of a freed pointer: expected NULL and EINVAL");
}

void realloc_of_stack() {
  char local[32];
  marker("realloc-stack", "realloc", local);
  errno = 0;
  void* q = g_realloc(local, 100);
  if (q != nullptr || errno != EINVAL) failed("realloc of a stack pointer: expected NULL and EINVAL");
}

void usable_size_of_stack() {
  char local[32];
  marker("usable-size-stack", "malloc_usable_size", local);
  if (g_usable(local) != 0) failed("malloc_usable_size of a stack pointer: expected 0");
}

// After the errors: objects of every kind must still be distinct and keep
// their contents. A double free that slipped into a free list would hand the
// same address out twice.
void heap_still_works() {
  const size_t sizes[] = {8, 32, 100, 400, 1000, 4096, 20000, 40000, 1 << 20};
  std::vector<std::pair<void*, size_t>> objs;
  std::set<void*> seen;
  for (int round = 0; round < 400; ++round) {
    for (size_t n : sizes) {
      if (n >= 40000 && round % 20 != 0) continue;  // fewer huge ones
      void* p = filled_malloc(n, static_cast<int>(objs.size() & 0xff));
      if (!seen.insert(p).second) failed("the heap handed out an address twice");
      objs.push_back({p, n});
    }
  }
  for (size_t i = 0; i < objs.size(); ++i) {
    if (!intact(objs[i].first, objs[i].second, static_cast<int>(i & 0xff))) failed("object contents changed");
    g_free(objs[i].first);
  }
  printf("heap still works: %zu objects checked\n", objs.size());
}

bool shim_loaded() {
  Dl_info info{};
  void* sym = dlsym(RTLD_DEFAULT, "malloc");
  return sym != nullptr && dladdr(sym, &info) != 0 && info.dli_fname != nullptr &&
         strstr(info.dli_fname, "memd") != nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IONBF, 0);
  if (!shim_loaded()) {
    printf("FAIL: malloc is not memd's; run under LD_PRELOAD=libmemd-malloc.so\n");
    return 2;
  }
  if (argc > 1 && strcmp(argv[1], "double-free") == 0) {
    double_free("double-free-small", 32);
    printf("survived a double free\n");  // not reached with MEMD_ABORT_ON_ERROR=1
    return 0;
  }
  free_of_stack();
  free_interior("free-interior-small", 100, 16);
  free_interior("free-interior-large", 4096, 64);
  free_interior("free-interior-huge", 1 << 20, 4096);
  double_free("double-free-small", 32);
  double_free("double-free-large", 4096);
  double_free("double-free-huge", 1 << 20);
  double_free_remote("double-free-remote-small", 48);
  double_free_remote("double-free-remote-large", 3000);
  bad_frees_from_fresh_thread();
  realloc_of_freed("realloc-freed-small", 32);
  realloc_of_freed("realloc-freed-huge", 1 << 20);
  realloc_of_stack();
  usable_size_of_stack();
  marker("end", "-", nullptr);
  heap_still_works();
  printf("%d failures\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}
