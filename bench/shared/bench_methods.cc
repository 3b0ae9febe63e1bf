// The pool and last methods of memd::Region against the heaps a program
// would use instead, side by side in one run (every round runs every
// allocator; ratios are taken per round, then the median).
//
//   ring64  one size: a ring of 4096 live 64-byte objects, then `ops` times a
//           random slot's object is freed and a new one allocated and
//           written (the pool method's case: nodes of one type).
//           memd-pool, memd-best (regions in POSIX shm), boost-node
//           (Boost.Interprocess node_allocator: its pool of one size in a
//           managed_shared_memory segment), boost-shm (the segment's
//           allocate), glibc malloc, mimalloc (mi_malloc, if installed),
//           pmr-pool (std::pmr::unsynchronized_pool_resource, private).
//   arena   per-request arenas: objects of 8-256 bytes (random) are
//           allocated and written until 1 MiB is asked for, then all are
//           released at once: memd-last (clear), memd-best, glibc,
//           mimalloc and boost-shm (a free of each), pmr-monotonic
//           (std::pmr::monotonic_buffer_resource::release).
//
// The regions and segments are shared memory; glibc, mimalloc and pmr are
// private to the process, so those rows are not like for like (they share
// nothing): they say what a program gives up, or not, by putting its
// objects in shared memory.
//
// Usage: bench_methods [--rounds N] [--ops N] [--only ALLOCATOR]
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <memory_resource>
#include <string>
#include <vector>

#include <boost/interprocess/allocators/node_allocator.hpp>
#include <boost/interprocess/managed_shared_memory.hpp>

#include "region/region.h"

namespace {

namespace bip = boost::interprocess;

struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
};

// What a workload asks of an allocator.
struct Ops {
  std::function<void*(size_t)> alloc;
  std::function<void(void*)> free;      // one object (not called by arena allocators that only release)
  std::function<void()> release_all;   // arena: give everything back (nullptr: free each object)
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ns per alloc+free pair.
double run_ring(const Ops& a, uint64_t ops) {
  constexpr size_t kSlots = 4096, kSize = 64;
  std::vector<void*> ring(kSlots);
  for (auto& p : ring) {
    p = a.alloc(kSize);
    if (p == nullptr) std::abort();
    std::memset(p, 1, kSize);
  }
  Rng rng{0x9e3779b97f4a7c15ull};
  auto t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < ops; ++i) {
    size_t k = rng.next() % kSlots;
    a.free(ring[k]);
    void* p = a.alloc(kSize);
    if (p == nullptr) std::abort();
    static_cast<uint64_t*>(p)[0] = i;
    ring[k] = p;
  }
  double t = seconds_since(t0);
  for (void* p : ring) a.free(p);
  return t * 1e9 / static_cast<double>(ops);
}

// ns per object of an arena's life: allocation, a write, and its share of
// the release.
double run_arena(const Ops& a, uint64_t ops) {
  Rng rng{0x2545f4914f6cdd1dull};
  std::vector<void*> live;
  live.reserve(16384);
  uint64_t objects = 0;
  auto t0 = std::chrono::steady_clock::now();
  while (objects < ops) {
    size_t asked = 0;
    while (asked < (size_t{1} << 20)) {
      size_t n = 8 + rng.next() % 249;
      void* p = a.alloc(n);
      if (p == nullptr) std::abort();
      static_cast<uint64_t*>(p)[0] = n;
      if (!a.release_all) live.push_back(p);
      asked += n;
      ++objects;
    }
    if (a.release_all) {
      a.release_all();
    } else {
      for (void* p : live) a.free(p);
      live.clear();
    }
  }
  return seconds_since(t0) * 1e9 / static_cast<double>(objects);
}

std::string stem() { return "memd-bench-methods-" + std::to_string(getpid()); }

// Runs `work` on a fresh region of method `m` in POSIX shm (removed after).
template <class Work>
double in_region(memd::Method m, const char* tag, Work work) {
  std::string name = stem() + "-" + tag;
  (void)memd::Region::remove(name, memd::Discipline::kShm);
  memd::RegionOptions o;
  o.discipline = memd::Discipline::kShm;
  o.method = m;
  o.max_bytes = size_t{512} << 20;
  auto r = memd::Region::create(name, o);
  if (!r.ok()) {
    std::fprintf(stderr, "Region::create: %s\n", r.status().ToString().c_str());
    std::exit(1);
  }
  double ns = work(**r);
  r->reset();
  (void)memd::Region::remove(name, memd::Discipline::kShm);
  return ns;
}

// Runs `work` on a fresh Boost.Interprocess segment in POSIX shm.
template <class Work>
double in_segment(const char* tag, Work work) {
  std::string name = stem() + "-" + tag;
  bip::shared_memory_object::remove(name.c_str());
  double ns = 0;
  {
    bip::managed_shared_memory seg(bip::create_only, name.c_str(), size_t{512} << 20);
    ns = work(seg);
  }
  bip::shared_memory_object::remove(name.c_str());
  return ns;
}

// What a workload calls on a region: its alloc and free, or its clear.
Ops region_ops(memd::Region& r) {
  return {[&r](size_t n) { return r.alloc(n); }, [&r](void* p) { r.free(p); }, nullptr};
}
Ops segment_ops(bip::managed_shared_memory& seg) {
  return {[&seg](size_t n) { return seg.allocate(n); }, [&seg](void* p) { seg.deallocate(p); }, nullptr};
}

struct Mimalloc {
  void* (*malloc)(size_t) = nullptr;
  void (*free)(void*) = nullptr;
  Mimalloc() {
    void* h = dlopen("libmimalloc.so.2", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) return;
    malloc = reinterpret_cast<void* (*)(size_t)>(dlsym(h, "mi_malloc"));
    free = reinterpret_cast<void (*)(void*)>(dlsym(h, "mi_free"));
    if (malloc == nullptr || free == nullptr) malloc = nullptr;
  }
};

using Runner = std::function<double(uint64_t)>;

struct Case {
  std::string workload, allocator;
  Runner run;
};

std::vector<Case> cases() {
  static Mimalloc mi;
  std::vector<Case> out;
  auto glibc = Ops{[](size_t n) { return std::malloc(n); }, [](void* p) { std::free(p); }, nullptr};

  // --- ring64 ---
  out.push_back({"ring64", "memd-pool", [](uint64_t ops) {
                   return in_region(memd::Method::kPool, "pool", [&](memd::Region& r) { return run_ring(region_ops(r), ops); });
                 }});
  out.push_back({"ring64", "memd-best", [](uint64_t ops) {
                   return in_region(memd::Method::kBest, "best", [&](memd::Region& r) { return run_ring(region_ops(r), ops); });
                 }});
  // What the debug and profile methods cost over best (their books are in
  // the region: a header, guards and a site's counts per object).
  out.push_back({"ring64", "memd-debug", [](uint64_t ops) {
                   return in_region(memd::Method::kDebug, "debug", [&](memd::Region& r) { return run_ring(region_ops(r), ops); });
                 }});
  out.push_back({"ring64", "memd-profile", [](uint64_t ops) {
                   return in_region(memd::Method::kProfile, "profile",
                                    [&](memd::Region& r) { return run_ring(region_ops(r), ops); });
                 }});
  out.push_back({"ring64", "boost-node", [](uint64_t ops) {
                   return in_segment("bnode", [&](bip::managed_shared_memory& seg) {
                     struct Obj {
                       char b[64];
                     };
                     bip::node_allocator<Obj, bip::managed_shared_memory::segment_manager> pool(seg.get_segment_manager());
                     return run_ring({[&](size_t) { return static_cast<void*>(pool.allocate_one().get()); },
                                      [&](void* p) { pool.deallocate_one(static_cast<Obj*>(p)); }, nullptr},
                                     ops);
                   });
                 }});
  out.push_back({"ring64", "boost-shm", [](uint64_t ops) {
                   return in_segment("bshm", [&](bip::managed_shared_memory& seg) { return run_ring(segment_ops(seg), ops); });
                 }});
  out.push_back({"ring64", "glibc", [glibc](uint64_t ops) { return run_ring(glibc, ops); }});
  if (mi.malloc != nullptr) {
    out.push_back({"ring64", "mimalloc", [](uint64_t ops) {
                     return run_ring({[](size_t n) { return mi.malloc(n); }, [](void* p) { mi.free(p); }, nullptr}, ops);
                   }});
  }
  out.push_back({"ring64", "pmr-pool", [](uint64_t ops) {
                   std::pmr::unsynchronized_pool_resource pool;
                   return run_ring({[&](size_t n) { return pool.allocate(n, 16); },
                                    [&](void* p) { pool.deallocate(p, 64, 16); }, nullptr},
                                   ops);
                 }});

  // --- arena ---
  out.push_back({"arena", "memd-last", [](uint64_t ops) {
                   return in_region(memd::Method::kLast, "last", [&](memd::Region& r) {
                     return run_arena({[&r](size_t n) { return r.alloc(n); }, nullptr,
                                       [&r] {
                                         if (!r.clear().ok()) std::abort();
                                       }},
                                      ops);
                   });
                 }});
  out.push_back({"arena", "memd-best", [](uint64_t ops) {
                   return in_region(memd::Method::kBest, "abest", [&](memd::Region& r) { return run_arena(region_ops(r), ops); });
                 }});
  out.push_back({"arena", "boost-shm", [](uint64_t ops) {
                   return in_segment("abshm", [&](bip::managed_shared_memory& seg) { return run_arena(segment_ops(seg), ops); });
                 }});
  out.push_back({"arena", "glibc", [glibc](uint64_t ops) { return run_arena(glibc, ops); }});
  if (mi.malloc != nullptr) {
    out.push_back({"arena", "mimalloc", [](uint64_t ops) {
                     return run_arena({[](size_t n) { return mi.malloc(n); }, [](void* p) { mi.free(p); }, nullptr}, ops);
                   }});
  }
  out.push_back({"arena", "pmr-monotonic", [](uint64_t ops) {
                   std::pmr::monotonic_buffer_resource arena;
                   return run_arena({[&](size_t n) { return arena.allocate(n, 16); }, nullptr, [&] { arena.release(); }}, ops);
                 }});
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  uint64_t ops = 2'000'000;
  std::string only;  // one allocator alone (profiling); ratios then need its peers
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (a == "--ops" && i + 1 < argc) ops = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench_methods [--rounds N] [--ops N] [--only ALLOCATOR]\n");
      return 2;
    }
  }
  if (rounds < 1 || ops < 1) return 2;
  std::vector<Case> all = cases();
  if (!only.empty()) {
    for (const Case& c : all) {
      if (c.allocator != only) continue;
      for (int r = 0; r < rounds; ++r) std::printf("%s %s %.1f ns/op\n", c.workload.c_str(), only.c_str(), c.run(ops));
    }
    return 0;
  }
  // ns[workload][allocator][round]
  std::map<std::string, std::map<std::string, std::vector<double>>> ns;
  for (int r = 0; r < rounds; ++r) {
    for (const Case& c : all) ns[c.workload][c.allocator].push_back(c.run(ops));
  }
  std::printf("| workload | allocator | ns/op (median of %d) | min-max | x glibc (paired, median) | x memd method (paired, median) |\n",
              rounds);
  std::printf("|---|---|---:|---:|---:|---:|\n");
  for (const std::string& w : {std::string("ring64"), std::string("arena")}) {
    std::string method = w == "ring64" ? "memd-pool" : "memd-last";
    for (const Case& c : all) {
      if (c.workload != w) continue;
      const std::vector<double>& v = ns[w][c.allocator];
      std::vector<double> to_glibc, to_method;
      for (int r = 0; r < rounds; ++r) {
        to_glibc.push_back(v[r] / ns[w]["glibc"][r]);
        to_method.push_back(v[r] / ns[w][method][r]);
      }
      std::printf("| %s | %s | %.1f | %.1f-%.1f | %.2f | %.2f |\n", w.c_str(), c.allocator.c_str(), median(v),
                  *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()), median(to_glibc),
                  median(to_method));
    }
  }
  return 0;
}
