// The malloc API as the memd shim provides it: run under
// LD_PRELOAD=libmemd-malloc.so (not linked to memd). Plain checks; every
// failed one is printed and the exit status is non-zero.
//
// Built with -fno-builtin so the compiler keeps every call and assumes
// nothing about malloc's results; sizes pass through `opaque` so it cannot
// fold or warn about the deliberately absurd ones.
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <set>
#include <string_view>
#include <vector>

namespace {

int g_failures = 0;

#define CHECK(cond, ...)                                        \
  do {                                                          \
    if (!(cond)) {                                              \
      ++g_failures;                                             \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);    \
      printf(__VA_ARGS__);                                      \
      printf("\n");                                             \
    }                                                           \
  } while (0)

size_t opaque(size_t v) {
  asm volatile("" : "+r"(v));
  return v;
}
template <typename T>
T* escape(T* p) {
  asm volatile("" : "+r"(p) : : "memory");
  return p;
}

bool aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

void fill(void* p, size_t n, unsigned seed) {
  auto* b = static_cast<unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>(seed + i * 7);
}
bool filled(const void* p, size_t n, unsigned seed) {
  auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != static_cast<unsigned char>(seed + i * 7)) return false;
  }
  return true;
}
bool all_zero(const void* p, size_t n) {
  auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != 0) return false;
  }
  return true;
}

// Sizes from 1 B to 8 MiB: every small class edge, the medium/large/huge
// boundaries of the default parameters (120, 496, 32768) and odd sizes.
std::vector<size_t> sizes() {
  std::vector<size_t> v;
  for (size_t s = 1; s <= 520; ++s) v.push_back(s);
  for (size_t s = 512; s <= (size_t{8} << 20); s *= 2) {
    for (size_t d : {size_t{0}, size_t{1}, size_t{13}}) {
      v.push_back(s - d);
      v.push_back(s + d);
    }
  }
  for (size_t s : {4000, 4097, 32767, 32768, 32769, 40000, 81920, 100000, 123457, 1000001}) v.push_back(s);
  return v;
}

// The shim must be the malloc in use; checking glibc by mistake would pass
// vacuously.
bool shim_loaded() {
  Dl_info info{};
  void* sym = dlsym(RTLD_DEFAULT, "malloc");
  return sym != nullptr && dladdr(sym, &info) != 0 && info.dli_fname != nullptr &&
         strstr(info.dli_fname, "memd") != nullptr;
}

void test_malloc_zero() {
  std::set<void*> seen;
  std::vector<void*> ps;
  for (int i = 0; i < 100; ++i) {
    void* p = malloc(opaque(0));
    CHECK(p != nullptr, "malloc(0) returned NULL");
    CHECK(seen.insert(p).second, "malloc(0) returned %p twice while live", p);
    ps.push_back(p);
  }
  for (void* p : ps) free(p);
}

void test_calloc() {
  for (size_t n : sizes()) {
    // Dirty memory first, so reused memory must really be cleared.
    void* p = malloc(n);
    CHECK(p != nullptr, "malloc(%zu)", n);
    memset(p, 0xa5, n);
    free(escape(p));
    void* q = calloc(1, n);
    CHECK(q != nullptr && all_zero(q, n), "calloc(1, %zu) after reuse not zero", n);
    void* r = calloc(n, 1);
    CHECK(r != nullptr && all_zero(r, n), "calloc(%zu, 1) not zero", n);
    free(q);
    free(r);
  }
  // Many of a size at once: objects from the same blocks the fills used.
  for (size_t n : {size_t{48}, size_t{300}, size_t{5000}, size_t{50000}}) {
    std::vector<void*> ps;
    for (int i = 0; i < 200; ++i) ps.push_back(memset(malloc(n), 0xff, n));
    for (void* p : ps) free(p);
    for (void*& p : ps) {
      p = calloc(n / 8, 8);
      CHECK(p != nullptr && all_zero(p, n / 8 * 8), "calloc(%zu, 8) after reuse not zero", n / 8);
    }
    for (void* p : ps) free(p);
  }
  struct {
    size_t count, size;
  } overflow[] = {{SIZE_MAX, 2}, {2, SIZE_MAX}, {size_t{1} << 33, size_t{1} << 31}, {SIZE_MAX / 3 + 1, 3}};
  for (auto o : overflow) {
    errno = 0;
    void* p = calloc(opaque(o.count), opaque(o.size));
    CHECK(p == nullptr && errno == ENOMEM, "calloc(%zu, %zu) = %p errno %d", o.count, o.size, p, errno);
  }
  errno = 0;
  void* p = calloc(opaque(1), opaque(SIZE_MAX - 8));
  CHECK(p == nullptr && errno == ENOMEM, "calloc(1, SIZE_MAX-8) = %p errno %d", p, errno);
}

void test_realloc() {
  // Grow from 1 B to 8 MiB and back in one object, checking the contents.
  std::vector<size_t> ss = sizes();
  void* p = nullptr;
  size_t have = 0;
  unsigned seed = 1;
  for (size_t i = 0; i < ss.size() * 2; ++i) {
    size_t n = i < ss.size() ? ss[i] : ss[ss.size() * 2 - 1 - i];
    void* q = realloc(p, n);
    CHECK(q != nullptr, "realloc(%p, %zu)", p, n);
    if (q == nullptr) break;
    size_t kept = have < n ? have : n;
    CHECK(filled(q, kept, seed), "realloc to %zu lost contents (had %zu)", n, have);
    fill(q, n, ++seed);
    p = q;
    have = n;
  }
  free(p);
  // Zig-zag sizes across size kinds.
  size_t zig[] = {10, 100000, 20, 3000000, 500, 40000, 8 << 20, 1, 33000, 32000, 600};
  p = malloc(5);
  fill(p, 5, seed);
  have = 5;
  for (size_t n : zig) {
    void* q = realloc(p, n);
    CHECK(q != nullptr && filled(q, have < n ? have : n, seed), "zig-zag realloc to %zu", n);
    fill(q, n, ++seed);
    p = q;
    have = n;
  }
  free(p);

  p = realloc(nullptr, 100);
  CHECK(p != nullptr && malloc_usable_size(p) >= 100, "realloc(NULL, 100)");
  // realloc(p, 0) frees p and returns NULL (glibc's behaviour).
  void* z = realloc(p, opaque(0));
  CHECK(z == nullptr, "realloc(p, 0) = %p, expected NULL", z);

  // A failed realloc leaves the object alone (a fresh object per case, so
  // one failure does not cascade into the next).
  for (size_t n : {size_t{64}, size_t{4096}, size_t{100000}, size_t{3} << 20}) {
    for (size_t huge : {SIZE_MAX, SIZE_MAX - 4096, size_t{1} << 62, (size_t{1} << 44) + 4096}) {
      void* o = malloc(n);
      fill(o, n, 3);
      size_t usable = malloc_usable_size(o);
      errno = 0;
      void* q = realloc(o, opaque(huge));
      CHECK(q == nullptr && errno == ENOMEM, "realloc(%zu-byte object, %#zx) = %p errno %d", n, huge, q, errno);
      if (q != nullptr) continue;  // the object is in an unknown state: leave it
      void* kept = escape(o);
      CHECK(malloc_usable_size(kept) == usable && filled(kept, n, 3),
            "failed realloc(%zu-byte object, %#zx) damaged it", n, huge);
      free(kept);
    }
  }

  // `a` is still ours after the failed call; volatile keeps the compiler from
  // assuming otherwise (-Wuse-after-free).
  void* volatile a = malloc(40);
  errno = 0;
  void* q = reallocarray(a, opaque(SIZE_MAX / 2), opaque(3));
  CHECK(q == nullptr && errno == ENOMEM, "reallocarray overflow = %p errno %d", q, errno);
  q = reallocarray(a, opaque(10), opaque(100));
  CHECK(q != nullptr && malloc_usable_size(q) >= 1000, "reallocarray(p, 10, 100)");
  free(q);
}

void test_huge_requests() {
  for (size_t n : {SIZE_MAX, SIZE_MAX - 4096, size_t{1} << 62, SIZE_MAX / 2 + 1, (size_t{1} << 44) + 1}) {
    errno = 0;
    void* p = malloc(opaque(n));
    CHECK(p == nullptr && errno == ENOMEM, "malloc(%#zx) = %p errno %d", n, p, errno);
    free(p);
    for (size_t a : {size_t{16}, size_t{64}, size_t{4096}, size_t{1} << 21}) {
      // n - a + 2 makes size + alignment wrap around when rounded.
      for (size_t m : {n, n - a + 2}) {
        errno = 0;
        p = memalign(opaque(a), opaque(m));
        CHECK(p == nullptr && errno == ENOMEM, "memalign(%zu, %#zx) = %p errno %d", a, m, p, errno);
        errno = 0;
        p = aligned_alloc(opaque(a), opaque(m));
        CHECK(p == nullptr && errno == ENOMEM, "aligned_alloc(%zu, %#zx) = %p errno %d", a, m, p, errno);
        void* out = &g_failures;  // must stay untouched on failure
        int rc = posix_memalign(&out, opaque(a), opaque(m));
        CHECK(rc == ENOMEM && out == &g_failures, "posix_memalign(%zu, %#zx) = %d", a, m, rc);
      }
    }
  }
  errno = 0;
  void* p = pvalloc(opaque(SIZE_MAX - 100));
  CHECK(p == nullptr && errno == ENOMEM, "pvalloc(SIZE_MAX - 100) = %p errno %d", p, errno);
  errno = 0;
  p = valloc(opaque(SIZE_MAX - 100));
  CHECK(p == nullptr && errno == ENOMEM, "valloc(SIZE_MAX - 100) = %p errno %d", p, errno);
}

// malloc, calloc and realloc owe every object the alignment of any type it
// could hold (C17 7.22.3): alignof(max_align_t), 16 on x86-64, for every
// request over 8 bytes. Several objects of each size, so a class whose stride
// is an odd multiple of 8 would show at its second object.
void test_fundamental_alignment() {
  const size_t want = alignof(std::max_align_t);
  std::vector<void*> live;
  for (size_t n = 1; n <= 2048; ++n) {
    size_t a = n <= 8 ? 8 : want;
    for (int k = 0; k < 4; ++k) {
      void* p = malloc(n);
      CHECK(p != nullptr && aligned(p, a), "malloc(%zu) = %p, not %zu-byte aligned", n, p, a);
      live.push_back(p);
    }
    void* c = calloc(1, n);
    CHECK(c != nullptr && aligned(c, a), "calloc(1, %zu) = %p, not %zu-byte aligned", n, c, a);
    live.push_back(c);
    void* r = realloc(malloc(n > 16 ? n / 2 : 1), n);
    CHECK(r != nullptr && aligned(r, a), "realloc(.., %zu) = %p, not %zu-byte aligned", n, r, a);
    live.push_back(r);
  }
  for (void* p : live) free(p);
}

void test_alignment() {
  size_t req[] = {1, 8, 24, 100, 496, 1000, 4096, 5000, 40000, 300000};
  for (size_t a = 8; a <= (size_t{1} << 21); a *= 2) {
    for (size_t n : req) {
      void* p = memalign(a, n);
      CHECK(p != nullptr && aligned(p, a) && malloc_usable_size(p) >= n, "memalign(%zu, %zu) = %p", a, n, p);
      if (p) memset(p, 1, n);
      void* q = aligned_alloc(a, n);
      CHECK(q != nullptr && aligned(q, a) && malloc_usable_size(q) >= n, "aligned_alloc(%zu, %zu) = %p", a, n, q);
      if (q) memset(q, 2, n);
      void* r = nullptr;
      int rc = posix_memalign(&r, a, n);
      CHECK(rc == 0 && r != nullptr && aligned(r, a) && malloc_usable_size(r) >= n, "posix_memalign(%zu, %zu) = %d %p",
            a, n, rc, r);
      if (r) memset(r, 3, n);
      // Writes to one must not reach the others.
      auto* pb = static_cast<unsigned char*>(p);
      auto* qb = static_cast<unsigned char*>(q);
      CHECK(pb && qb && pb[0] == 1 && pb[n - 1] == 1 && qb[0] == 2 && qb[n - 1] == 2, "aligned objects overlap");
      free(p);
      free(q);
      free(r);
    }
  }
  void* out = &g_failures;
  for (size_t bad : {size_t{0}, size_t{24}, size_t{4}, size_t{2}, size_t{1}, size_t{3}, size_t{100}}) {
    out = &g_failures;
    int rc = posix_memalign(&out, opaque(bad), 64);
    CHECK(rc == EINVAL && out == &g_failures, "posix_memalign(align %zu) = %d, expected EINVAL", bad, rc);
  }
  for (size_t bad : {size_t{0}, size_t{3}, size_t{24}, size_t{100}}) {
    errno = 0;
    void* p = aligned_alloc(opaque(bad), 64);
    CHECK(p == nullptr && errno == EINVAL, "aligned_alloc(%zu, 64) = %p errno %d", bad, p, errno);
    errno = 0;
    p = memalign(opaque(bad), 64);
    CHECK(p == nullptr && errno == EINVAL, "memalign(%zu, 64) = %p errno %d", bad, p, errno);
  }
  long page = sysconf(_SC_PAGESIZE);
  for (size_t n : {size_t{0}, size_t{1}, size_t{100}, size_t{4096}, size_t{4097}, size_t{100000}}) {
    void* v = valloc(n);
    CHECK(v != nullptr && aligned(v, page) && malloc_usable_size(v) >= n, "valloc(%zu) = %p", n, v);
    void* pv = pvalloc(n);
    size_t rounded = n == 0 ? page : (n + page - 1) / page * page;
    CHECK(pv != nullptr && aligned(pv, page) && malloc_usable_size(pv) >= rounded, "pvalloc(%zu) = %p usable %zu", n,
          pv, pv ? malloc_usable_size(pv) : 0);
    if (pv) memset(pv, 7, rounded);  // the whole rounded size is ours
    free(v);
    free(pv);
  }
}

// A thread's first allocation builds its heap on a slower path; that path
// must honour the alignment too, also the small ones (16 bytes for 24 asked
// is more than the 24-byte size class gives). Aligned new with an alignment
// of 16 or less is checked on both paths as well. After each aligned object
// one to three plain ones of the same size are kept, so the next object of
// that class (in this thread, or in a later thread given the same heap)
// starts at other offsets: an aligned start by luck does not hide a bug.
void* aligned_call(const char* what, size_t align, size_t size) {
  std::string_view w = what;
  void* p = nullptr;
  if (w == "posix_memalign") {
    if (posix_memalign(&p, align, size) != 0) p = nullptr;
  } else if (w == "aligned_alloc") {
    p = aligned_alloc(align, size);
  } else if (w == "memalign") {
    p = memalign(align, size);
  } else if (w == "aligned new") {
    p = ::operator new(size, std::align_val_t{align});
  } else {
    p = ::operator new(size, std::align_val_t{align}, std::nothrow);
  }
  return p;
}

void release_aligned(const char* what, size_t align, void* p) {
  if (std::string_view(what).starts_with("aligned new")) ::operator delete(p, std::align_val_t{align});
  else free(p);
}

struct FirstCall {
  const char* what;
  size_t align, size;
  int extra;  // plain objects of the same size to keep after it
  void* got;
  void* spares[3];
};

void* first_allocation_of_thread(void* arg) {
  auto* c = static_cast<FirstCall*>(arg);
  c->got = aligned_call(c->what, c->align, c->size);
  for (int i = 0; i < c->extra; ++i) c->spares[i] = malloc(c->size);
  return nullptr;
}

void test_alignment_of_a_threads_first_allocation() {
  struct Kept {
    const char* what;
    size_t align;
    void* p;
  };
  std::vector<Kept> kept;  // freed at the end: a freed one would be the next one handed out
  std::vector<void*> spares;
  for (const char* what : {"posix_memalign", "aligned_alloc", "memalign", "aligned new", "aligned new nothrow"}) {
    for (size_t a : {size_t{16}, size_t{32}, size_t{64}, size_t{4096}}) {
      for (size_t n : {size_t{24}, size_t{40}, size_t{100}, size_t{5000}}) {
        for (int round = 0; round < 3; ++round) {
          FirstCall c{what, a, n, round + 1, nullptr, {}};
          pthread_t t;
          if (pthread_create(&t, nullptr, first_allocation_of_thread, &c) != 0) {
            CHECK(false, "pthread_create failed");
            return;
          }
          pthread_join(t, nullptr);
          CHECK(c.got != nullptr && aligned(c.got, a) && malloc_usable_size(c.got) >= n,
                "%s(%zu, %zu) first in a new thread = %p", what, a, n, c.got);
          kept.push_back({what, a, c.got});
          spares.insert(spares.end(), c.spares, c.spares + c.extra);
          // And on this thread, whose heap exists.
          void* p = aligned_call(what, a, n);
          CHECK(p != nullptr && aligned(p, a) && malloc_usable_size(p) >= n, "%s(%zu, %zu) = %p", what, a, n, p);
          kept.push_back({what, a, p});
          for (int i = 0; i < c.extra; ++i) spares.push_back(malloc(n));
        }
      }
    }
  }
  for (const Kept& k : kept) release_aligned(k.what, k.align, k.p);
  for (void* p : spares) free(p);
}

void test_usable_size() {
  CHECK(malloc_usable_size(nullptr) == 0, "malloc_usable_size(NULL)");
  // Several neighbours at once, each written over its whole usable size: an
  // overstated usable size would overwrite a neighbour.
  for (size_t n : sizes()) {
    void* ps[4];
    size_t us[4];
    for (int i = 0; i < 4; ++i) {
      ps[i] = malloc(n);
      us[i] = malloc_usable_size(ps[i]);
      CHECK(us[i] >= n, "malloc_usable_size(malloc(%zu)) = %zu", n, us[i]);
      memset(ps[i], 0x30 + i, us[i]);
    }
    for (int i = 0; i < 4; ++i) {
      auto* b = static_cast<unsigned char*>(ps[i]);
      CHECK(b[0] == 0x30 + i && b[us[i] - 1] == 0x30 + i, "usable bytes of a %zu-byte object overlap", n);
      free(ps[i]);
    }
  }
}

struct alignas(256) Wide {
  char bytes[300];
};

int g_handler_calls = 0;
void handler_then_give_up() {
  ++g_handler_calls;
  std::set_new_handler(nullptr);  // the next failure throws
}

void test_new_delete() {
  int* i = new int(42);
  CHECK(*i == 42, "new int");
  delete i;
  auto* arr = new long[1000]();
  CHECK(arr[999] == 0, "new long[]() not value-initialised");
  delete[] arr;
  std::vector<Wide*> ws;
  for (int k = 0; k < 100; ++k) {
    ws.push_back(new Wide);
    CHECK(aligned(ws.back(), 256), "new alignas(256) = %p", static_cast<void*>(ws.back()));
  }
  for (Wide* w : ws) delete w;
  Wide* wa = new Wide[17];
  CHECK(aligned(wa, 256), "new alignas(256)[] = %p", static_cast<void*>(wa));
  delete[] wa;
  for (size_t a = 32; a <= (size_t{1} << 16); a *= 2) {
    void* p = ::operator new(a * 3, std::align_val_t{a});
    CHECK(aligned(p, a), "operator new(%zu, align %zu) = %p", a * 3, a, p);
    ::operator delete(p, a * 3, std::align_val_t{a});
    p = ::operator new[](100, std::align_val_t{a}, std::nothrow);
    CHECK(p && aligned(p, a), "operator new[](100, align %zu, nothrow) = %p", a, p);
    ::operator delete[](p, std::align_val_t{a}, std::nothrow);
  }
  void* s = ::operator new(24);
  ::operator delete(s, 24);  // sized delete
  s = ::operator new[](24, std::nothrow);
  ::operator delete[](s, std::nothrow);

  for (size_t huge : {SIZE_MAX - 4096, size_t{1} << 62, SIZE_MAX - 62}) {
    void* p = ::operator new(opaque(huge), std::nothrow);
    CHECK(p == nullptr, "nothrow new(%#zx) = %p", huge, p);
    p = ::operator new[](opaque(huge), std::nothrow);
    CHECK(p == nullptr, "nothrow new[](%#zx) = %p", huge, p);
    p = ::operator new(opaque(huge), std::align_val_t{64}, std::nothrow);
    CHECK(p == nullptr, "nothrow aligned new(%#zx) = %p", huge, p);
    bool threw = false;
    try {
      p = ::operator new(opaque(huge));
      ::operator delete(p);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    CHECK(threw, "new(%#zx) did not throw bad_alloc", huge);
    threw = false;
    try {
      p = ::operator new[](opaque(huge), std::align_val_t{64});
      ::operator delete[](p, std::align_val_t{64});
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    CHECK(threw, "aligned new[](%#zx) did not throw bad_alloc", huge);
  }
  // A new_handler runs before bad_alloc is thrown.
  std::set_new_handler(handler_then_give_up);
  bool threw = false;
  try {
    ::operator delete(::operator new(opaque(SIZE_MAX / 2)));
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  CHECK(threw && g_handler_calls == 1, "new_handler: threw %d, calls %d", threw, g_handler_calls);
}

void test_trim() {
  std::vector<void*> ps;
  for (int i = 0; i < 2000; ++i) ps.push_back(malloc(i * 37 % 70000 + 1));
  for (void* p : ps) free(p);
  malloc_trim(0);
  void* p = malloc(100);
  CHECK(p != nullptr, "malloc after malloc_trim");
  free(p);
  malloc_trim(1 << 20);
}

}  // namespace

int main() {
  setvbuf(stdout, nullptr, _IONBF, 0);
  if (!shim_loaded()) {
    printf("FAIL: malloc is not memd's; run under LD_PRELOAD=libmemd-malloc.so\n");
    return 2;
  }
  test_malloc_zero();
  test_calloc();
  test_realloc();
  test_huge_requests();
  test_fundamental_alignment();
  test_alignment();
  test_alignment_of_a_threads_first_allocation();
  test_usable_size();
  test_new_delete();
  test_trim();
  printf("%d failures\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}
