// Allocation hints on a traversal (the TP/Medius slides' claim: objects
// placed near the ones they link to walk faster at the same space). A
// singly linked ring of N nodes of 64 B is built interleaved with as many
// other live objects of the same size; half of those are freed (holes all
// over the heap), then the ring is churned: a random node's successor is
// unlinked and freed, and a new node linked in after a random node, CHURN
// times.
// Then the ring is walked WALKS times. Modes:
//   malloc     malloc/free (under LD_PRELOAD: the peer's; memd's shim as "memd")
//   heap       memd::Heap alloc/free, no hints
//   heap-near  memd::Heap alloc_near(size, the node it follows, a page)
//   std-list, hinted-list  the same on std::list over memd::Allocator, and
//              on memd::hinted_list (client/hinted.h)
//   std-set, hinted-set  a tree instead: N keys inserted in random order
//              (interleaved with the other objects), CHURN times a random
//              key erased and a new one inserted, walked in key order; on
//              std::set over memd::Allocator and on memd::hinted_set, whose
//              insertions hint the new key's neighbour in key order
// Prints "walk_ns_per_node=<x> churn_ns_per_op=<y> near_fraction=<z>" (z:
// of the nodes made after another, those within a page of it).
//
//   bench_hints MODE N CHURN WALKS
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <list>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "client/allocators.h"
#include "client/heap.h"
#include "client/hinted.h"

namespace {

struct Node {
  Node* next;
  uint32_t slot;  // index in the handle array
  uint32_t pad;
  uint64_t payload[6];
};
static_assert(sizeof(Node) == 64);

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Allocator {
  enum Kind { kMalloc, kHeap, kHeapNear } kind;
  memd::Heap* heap;
  void* alloc(const void* hint) {
    switch (kind) {
      case kMalloc: return std::malloc(sizeof(Node));
      case kHeap: return heap->alloc(sizeof(Node));
      case kHeapNear: return heap->alloc_near(sizeof(Node), hint, memd::Heap::kNearPage);
    }
    return nullptr;
  }
  void free(void* p) { kind == kMalloc ? std::free(p) : heap->free(p); }
};

// The churn's and the walks' times and the walks' checksum.
struct Timed {
  double churn_s = 0, walk_s = 0;
  uint64_t sum = 0, visited = 0;
};

// CHURN steps, then the walks, each phase timed: the shape every mode runs.
template <class Step, class Walk>
Timed churn_then_walk(size_t churn, Step step, Walk walk) {
  Timed t;
  double t0 = now_s();
  for (size_t i = 0; i < churn; ++i) step();
  double t1 = now_s();
  walk(&t.sum, &t.visited);
  t.churn_s = t1 - t0;
  t.walk_s = now_s() - t1;
  return t;
}

void report(const Timed& t, size_t churn, uint64_t hinted, uint64_t landed_near, size_t nodes) {
  std::printf("walk_ns_per_node=%.3f churn_ns_per_op=%.2f near_fraction=%.3f nodes=%zu check=%llu\n",
              t.walk_s * 1e9 / static_cast<double>(t.visited), t.churn_s * 1e9 / static_cast<double>(churn),
              static_cast<double>(landed_near) / static_cast<double>(hinted), nodes,
              static_cast<unsigned long long>(t.sum & 0xff));
}

// Objects of a node's size (64 B) allocated between a container's nodes as
// it is built, then half of them freed at random: holes in the container's
// own blocks, the fragmentation hints are meant to use.
class Holes {
 public:
  explicit Holes(memd::Heap& heap) : heap_(heap) {}
  ~Holes() {
    for (void* p : objects_) {
      if (p != nullptr) heap_.free(p);
    }
  }
  void add() { objects_.push_back(heap_.alloc(64)); }
  void free_half(std::mt19937_64& rng) {
    for (void*& p : objects_) {
      if (rng() % 2 == 0) heap_.free(p), p = nullptr;
    }
  }

 private:
  memd::Heap& heap_;
  std::vector<void*> objects_;
};

bool within_a_page(const void* a, const void* b) {
  auto d = reinterpret_cast<uintptr_t>(a) - reinterpret_cast<uintptr_t>(b);
  return d + 4096 <= 8192;  // |a - b| <= 4096
}

// The same workload on a standard list (its node: two links and 48 bytes,
// 64 B): std::list over memd::Allocator, or memd::hinted_list, whose
// insertions hint the element they follow.
struct Item {
  uint32_t slot;  // index in the iterator array
  uint32_t pad;
  uint64_t payload[5];
};

// The walks, out of line and named walk_*: run_hints.py --simulate counts
// the cache misses of these functions alone (callgrind --toggle-collect).
__attribute__((noinline)) void walk_ring(const Node* head, int walks, uint64_t* sum, uint64_t* visited) {
  for (int w = 0; w < walks; ++w) {
    const Node* x = head;
    do {
      *sum += x->payload[0];
      x = x->next;
      ++*visited;
    } while (x != head);
  }
}

template <class List>
__attribute__((noinline)) void walk_list(const List& list, int walks, uint64_t* sum, uint64_t* visited) {
  for (int w = 0; w < walks; ++w) {
    for (const Item& x : list) *sum += x.payload[0], ++*visited;
  }
}

template <class List>
int run_list(List& list, memd::Heap& heap, size_t n, size_t churn, int walks) {
  std::mt19937_64 rng(7);
  std::vector<typename List::iterator> at;
  Holes holes(heap);
  uint64_t hinted = 0, landed_near = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) holes.add();
    list.push_back(Item{static_cast<uint32_t>(i), 0, {rng()}});
    if (i > 0) ++hinted, landed_near += within_a_page(&list.back(), &*at.back());
    at.push_back(std::prev(list.end()));
  }
  holes.free_half(rng);
  Timed t = churn_then_walk(
      churn,
      [&] {
        auto gone = std::next(at[rng() % at.size()]);
        if (gone != list.end() && gone != list.begin()) {
          uint32_t slot = gone->slot;
          at[slot] = at.back();
          at[slot]->slot = slot;
          at.pop_back();
          list.erase(gone);
        }
        auto before = at[rng() % at.size()];
        auto x = list.insert(std::next(before), Item{static_cast<uint32_t>(at.size()), 0, {rng()}});
        ++hinted, landed_near += within_a_page(&*x, &*before);
        at.push_back(x);
      },
      [&](uint64_t* sum, uint64_t* visited) { walk_list(list, walks, sum, visited); });
  report(t, churn, hinted, landed_near, list.size());
  list.clear();
  return 0;
}

// The tree workload: a node of 64 B (colour, three links, 32 bytes of key
// and payload); near_fraction is of inserted keys, within a page of their
// successor in key order.
struct Key32 {
  uint64_t key;
  uint64_t payload[3];
  bool operator<(const Key32& o) const { return key < o.key; }
};

template <class Set>
__attribute__((noinline)) void walk_set(const Set& set, int walks, uint64_t* sum, uint64_t* visited) {
  for (int w = 0; w < walks; ++w) {
    for (const Key32& x : set) *sum += x.payload[0], ++*visited;
  }
}

template <class Set>
int run_set(Set& set, memd::Heap& heap, size_t n, size_t churn, int walks) {
  std::mt19937_64 rng(7);
  Holes holes(heap);
  std::vector<uint64_t> keys;
  uint64_t inserted = 0, landed_near = 0;
  auto insert = [&](uint64_t key) {
    auto [it, added] = set.insert(Key32{key, {rng(), 0, 0}});
    if (!added) return;
    keys.push_back(key);
    auto next = std::next(it);
    if (next != set.end()) ++inserted, landed_near += within_a_page(&*it, &*next);
  };
  for (size_t i = 0; i < n; ++i) {
    holes.add();
    insert(rng());
  }
  holes.free_half(rng);
  Timed t = churn_then_walk(
      churn,
      [&] {
        size_t at = rng() % keys.size();
        set.erase(Key32{keys[at], {}});
        keys[at] = keys.back();
        keys.pop_back();
        insert(rng());
      },
      [&](uint64_t* sum, uint64_t* visited) { walk_set(set, walks, sum, visited); });
  report(t, churn, inserted, landed_near, set.size());
  set.clear();
  return 0;
}

// A container mode on a fresh heap: `Hinted` over it, or `Plain` over
// memd::Allocator.
template <class Plain, class Hinted, class Run>
int on_fresh_heap(bool hinted, Run run) {
  auto made = memd::Heap::create();
  if (!made.ok()) return 1;
  if (hinted) {
    Hinted c(**made);
    return run(c, **made);
  }
  Plain c{typename Plain::allocator_type(**made)};
  return run(c, **made);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s malloc|heap|heap-near|std-list|hinted-list|std-set|hinted-set N CHURN WALKS\n",
                 argv[0]);
    return 2;
  }
  size_t n = std::strtoul(argv[2], nullptr, 10);
  size_t churn = std::strtoul(argv[3], nullptr, 10);
  int walks = std::atoi(argv[4]);
  auto mode = [&](const char* name) { return std::strcmp(argv[1], name) == 0; };
  if (mode("std-set") || mode("hinted-set")) {
    return on_fresh_heap<std::set<Key32, std::less<Key32>, memd::Allocator<Key32>>, memd::hinted_set<Key32>>(
        mode("hinted-set"), [&](auto& set, memd::Heap& heap) { return run_set(set, heap, n, churn, walks); });
  }
  if (mode("std-list") || mode("hinted-list")) {
    return on_fresh_heap<std::list<Item, memd::Allocator<Item>>, memd::hinted_list<Item>>(
        mode("hinted-list"), [&](auto& list, memd::Heap& heap) { return run_list(list, heap, n, churn, walks); });
  }
  std::unique_ptr<memd::Heap> heap;
  Allocator a{Allocator::kMalloc, nullptr};
  if (std::strcmp(argv[1], "malloc") != 0) {
    auto made = memd::Heap::create();
    if (!made.ok()) return 1;
    heap = std::move(*made);
    a.heap = heap.get();
    a.kind = std::strcmp(argv[1], "heap-near") == 0 ? Allocator::kHeapNear : Allocator::kHeap;
  }
  std::mt19937_64 rng(7);
  std::vector<Node*> nodes;   // every node, in no order (for random picks)
  std::vector<void*> others;  // the interleaved objects
  nodes.reserve(n);
  others.reserve(n);
  uint64_t hinted = 0, landed_near = 0;  // nodes made after another; of them, within a page of it
  auto make_node = [&](Node* after) {
    auto* x = static_cast<Node*>(a.alloc(after));
    if (x == nullptr) std::abort();
    if (after != nullptr) {
      ++hinted;
      landed_near += within_a_page(x, after);
    }
    x->slot = static_cast<uint32_t>(nodes.size());
    x->payload[0] = rng();
    nodes.push_back(x);
    return x;
  };
  Node* head = make_node(nullptr);
  head->next = head;
  Node* tail = head;
  for (size_t i = 1; i < n; ++i) {
    others.push_back(a.alloc(nullptr));
    Node* x = make_node(tail);
    x->next = head;
    tail->next = x;
    tail = x;
  }
  // Half the other objects go: holes all over the heap, the fragmentation
  // hints are meant to use.
  for (size_t i = 0; i < others.size(); ++i) {
    if (rng() % 2 == 0) a.free(others[i]), others[i] = nullptr;
  }
  Timed t = churn_then_walk(
      churn,
      [&] {
        Node* at = nodes[rng() % nodes.size()];
        Node* gone = at->next;
        if (gone != head && gone != at) {
          at->next = gone->next;
          Node* last = nodes.back();
          nodes[gone->slot] = last;
          last->slot = gone->slot;
          nodes.pop_back();
          a.free(gone);
        }
        Node* before = nodes[rng() % nodes.size()];
        Node* x = make_node(before);
        x->next = before->next;
        before->next = x;
      },
      [&](uint64_t* sum, uint64_t* visited) { walk_ring(head, walks, sum, visited); });
  report(t, churn, hinted, landed_near, nodes.size());
  for (Node* x : nodes) a.free(x);
  for (void* p : others) {
    if (p != nullptr) a.free(p);
  }
  return 0;
}
