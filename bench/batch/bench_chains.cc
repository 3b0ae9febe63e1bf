// Call-chain pools (the DPA paper's claim: objects of one allocation chain
// placed together walk faster). Plain malloc/free only: the allocator is
// whatever is preloaded (memd's shim with and without MEMD_CHAIN_POOLS=1,
// or a peer). Workloads:
//
//   lists  L linked lists of N nodes of SIZE bytes each, built round-robin
//          (one node of each list in turn), half of them through a malloc
//          wrapper (xmalloc, called from a function per list: the paper's
//          safe_malloc case), with a short-lived object of a random size
//          from other call sites after every node; then every list walked
//          WALKS times, summing its values.
//   sets   two std::set<uint64_t> and std::set<uint32_t> of N random keys
//          each, inserted interleaved with the short-lived objects; walked
//          in key order WALKS times.
//   hot    the DPA benchmarks' shape: 64 call sites allocate objects in
//          turn, and two of them (one through the wrapper) build the lists
//          that are then walked; the other sites' objects (half of them of
//          the nodes' size, half 16-128 B) are kept, a third of them freed
//          at random: the hot chains are 2 of 64. N nodes per hot list.
//
//   sites  one list whose nodes L call sites make in turn (a structure that
//          several functions insert into: what the paper's object-group
//          merging is for; each site's chain gets a pool of its own), with
//          a short-lived object after every node; N nodes per site.
//
// Prints "build_ns_per_node=<x> walk_ns_per_node=<y> adjacent=<z>" (z: the
// share of walked links whose next node lies within 128 bytes after the
// current one; for sets, of in-order successors).
//
//   bench_chains lists|sets|hot|sites N L SIZE WALKS
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <array>
#include <utility>
#include <set>
#include <vector>

namespace {

double now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

struct Node {
  Node* next;
  uint64_t value;
};

__attribute__((noinline)) void* xmalloc(size_t n) {
  void* p = std::malloc(n);
  if (p == nullptr) {
    std::fprintf(stderr, "out of memory\n");
    std::exit(2);
  }
  return p;
}

// A distinct call site per K: directly, or through the wrapper.
template <int K>
__attribute__((noinline)) void* site_direct(size_t n) {
  void* p = std::malloc(n);
  asm volatile("" ::"r"(p) : "memory");  // a call, not a tail call: the site is here
  return p;
}
template <int K>
__attribute__((noinline)) void* site_wrapped(size_t n) {
  void* p = xmalloc(n);
  asm volatile("" ::"r"(p) : "memory");
  return p;
}

using SiteFn = void* (*)(size_t);
template <int... K>
constexpr auto direct_sites(std::integer_sequence<int, K...>) {
  return std::array<SiteFn, sizeof...(K)>{&site_direct<K>...};
}
template <int... K>
constexpr auto wrapped_sites(std::integer_sequence<int, K...>) {
  return std::array<SiteFn, sizeof...(K)>{&site_wrapped<K>...};
}
// 64 + 64 sites: lists take the first, the clutter and the cold sites the rest.
constexpr auto kDirect = direct_sites(std::make_integer_sequence<int, 64>());
constexpr auto kWrapped = wrapped_sites(std::make_integer_sequence<int, 64>());

// Short-lived objects of random sizes from sites of their own.
struct Clutter {
  std::vector<void*> slots = std::vector<void*>(256, nullptr);
  std::mt19937_64 rng{7};
  void step() {
    void*& s = slots[rng() % slots.size()];
    std::free(s);
    size_t size = 16 + rng() % 113;
    s = kDirect[48 + rng() % 16](size);
    std::memset(s, 1, size);
  }
  ~Clutter() {
    for (void* p : slots) std::free(p);
  }
};

struct Result {
  double build_ns = 0, walk_ns = 0;
  uint64_t links = 0, adjacent = 0, check = 0, nodes = 0;
};

void walk_lists(const std::vector<Node*>& heads, int walks, Result* r) {
  double t0 = now_ns();
  uint64_t sum = 0;
  for (int w = 0; w < walks; ++w) {
    for (Node* h : heads) {
      for (Node* n = h; n != nullptr; n = n->next) sum += n->value;
    }
  }
  r->walk_ns = now_ns() - t0;
  r->check = sum;
  for (Node* h : heads) {
    for (Node* n = h; n != nullptr && n->next != nullptr; n = n->next) {
      ++r->links;
      auto d = reinterpret_cast<uintptr_t>(n->next) - reinterpret_cast<uintptr_t>(n);
      r->adjacent += d > 0 && d <= 128;
    }
  }
}

void free_lists(std::vector<Node*>& heads) {
  for (Node* h : heads) {
    for (Node* n = h; n != nullptr;) {
      Node* next = n->next;
      std::free(n);
      n = next;
    }
  }
}

// L lists, half through the wrapper, round-robin with clutter.
Result lists(size_t n, int l, size_t size, int walks) {
  Result r;
  std::vector<Node*> heads(l, nullptr), tails(l, nullptr);
  Clutter clutter;
  double t0 = now_ns();
  for (size_t i = 0; i < n; ++i) {
    for (int k = 0; k < l; ++k) {
      auto* node = static_cast<Node*>(k % 2 ? kWrapped[k](size) : kDirect[k](size));
      node->next = nullptr;
      node->value = i * l + k;
      (tails[k] ? tails[k]->next : heads[k]) = node;
      tails[k] = node;
      clutter.step();
    }
  }
  r.build_ns = now_ns() - t0;
  r.nodes = n * l;
  walk_lists(heads, walks, &r);
  free_lists(heads);
  return r;
}

// One list, its nodes made by L direct sites in turn, with clutter.
Result sites(size_t n, int l, size_t size, int walks) {
  Result r;
  Node* head = nullptr;
  Node* tail = nullptr;
  Clutter clutter;
  double t0 = now_ns();
  for (size_t i = 0; i < n; ++i) {
    for (int k = 0; k < l; ++k) {
      auto* node = static_cast<Node*>(kDirect[k](size));
      node->next = nullptr;
      node->value = i * l + k;
      (tail ? tail->next : head) = node;
      tail = node;
      clutter.step();
    }
  }
  r.build_ns = now_ns() - t0;
  r.nodes = n * l;
  std::vector<Node*> heads{head};
  walk_lists(heads, walks, &r);
  free_lists(heads);
  return r;
}

// Two sets of different key types (two instantiations: two call chains).
Result sets(size_t n, int walks) {
  Result r;
  std::set<uint64_t> a;
  std::set<uint32_t> b;
  Clutter clutter;
  std::mt19937_64 rng(11);
  double t0 = now_ns();
  for (size_t i = 0; i < n; ++i) {
    a.insert(rng());
    clutter.step();
    b.insert(static_cast<uint32_t>(rng()));
    clutter.step();
  }
  r.build_ns = now_ns() - t0;
  r.nodes = a.size() + b.size();
  double t1 = now_ns();
  uint64_t sum = 0;
  for (int w = 0; w < walks; ++w) {
    for (uint64_t v : a) sum += v;
    for (uint32_t v : b) sum += v;
  }
  r.walk_ns = now_ns() - t1;
  r.check = sum;
  auto count_adjacent = [&r](auto& s) {
    const void* prev = nullptr;
    for (auto& v : s) {
      const void* here = &v;
      if (prev != nullptr) {
        ++r.links;
        auto d = reinterpret_cast<uintptr_t>(here) - reinterpret_cast<uintptr_t>(prev);
        r.adjacent += d > 0 && d <= 128;
      }
      prev = here;
    }
  };
  count_adjacent(a);
  count_adjacent(b);
  return r;
}

// 64 sites take turns; sites 0 (direct) and 1 (wrapped) build the hot
// lists, the others cold objects of 16-128 B, a third of them freed.
Result hot(size_t n, size_t size, int walks) {
  Result r;
  std::vector<Node*> heads(2, nullptr), tails(2, nullptr);
  std::vector<void*> cold;
  std::mt19937_64 rng(5);
  double t0 = now_ns();
  for (size_t i = 0; i < n; ++i) {
    for (int k = 0; k < 2; ++k) {
      auto* node = static_cast<Node*>(k ? kWrapped[1](size) : kDirect[0](size));
      node->next = nullptr;
      node->value = i * 2 + k;
      (tails[k] ? tails[k]->next : heads[k]) = node;
      tails[k] = node;
    }
    // Three cold objects per hot pair, from the other 62 sites in turn;
    // half of them of the hot nodes' size (the same type of node in other
    // structures, which a size-segregated heap alone cannot keep apart).
    for (int c = 0; c < 3; ++c) {
      int site = 2 + static_cast<int>((i * 3 + c) % 62);
      size_t s = rng() % 2 ? size : 16 + rng() % 113;
      void* p = site % 2 ? kWrapped[site](s) : kDirect[site](s);
      std::memset(p, 2, s);
      if (rng() % 3 == 0) {
        std::free(p);
      } else {
        cold.push_back(p);
      }
    }
  }
  r.build_ns = now_ns() - t0;
  r.nodes = 2 * n;
  walk_lists(heads, walks, &r);
  free_lists(heads);
  for (void* p : cold) std::free(p);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s lists|sets|hot|sites N L SIZE WALKS\n", argv[0]);
    return 2;
  }
  const char* mode = argv[1];
  size_t n = std::strtoull(argv[2], nullptr, 10);
  int l = std::atoi(argv[3]);
  size_t size = std::strtoull(argv[4], nullptr, 10);
  int walks = std::atoi(argv[5]);
  if (size < sizeof(Node) || l < 1 || l > 32) {
    std::fprintf(stderr, "SIZE must be at least %zu, L 1..32\n", sizeof(Node));
    return 2;
  }
  Result r;
  if (std::strcmp(mode, "lists") == 0) r = lists(n, l, size, walks);
  else if (std::strcmp(mode, "sets") == 0) r = sets(n, walks);
  else if (std::strcmp(mode, "hot") == 0) r = hot(n, size, walks);
  else if (std::strcmp(mode, "sites") == 0) r = sites(n, l, size, walks);
  else {
    std::fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  std::printf("build_ns_per_node=%.2f walk_ns_per_node=%.3f adjacent=%.3f nodes=%llu check=%llu\n",
              r.build_ns / static_cast<double>(r.nodes), r.walk_ns / (static_cast<double>(r.nodes) * walks),
              r.links ? static_cast<double>(r.adjacent) / r.links : 0.0, static_cast<unsigned long long>(r.nodes),
              static_cast<unsigned long long>(r.check));
  return 0;
}
