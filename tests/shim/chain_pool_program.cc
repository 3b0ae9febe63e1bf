// A program for the call-chain pools (MEMD_CHAIN_POOLS=1 under the shim):
// four linked lists of 40-byte nodes built interleaved, two from call sites
// of their own and two through one allocation wrapper (as the DPA paper's
// safe_malloc; it calls operator new, whose chains take the same path as
// malloc's), with other allocations in between. It prints, per list, the
// share of nodes whose successor lies right after them in memory -- near 1
// when each list has a pool of its own, near 0 when the lists interleave --
// then walks and checks every list, and frees two of them from another
// thread (remote frees into the pools' blocks) and the rest itself.
#include <malloc.h>
#include <pthread.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

namespace {

struct Node {
  Node* next;
  uint64_t value;
  char pad[24];
};
static_assert(sizeof(Node) == 40);

__attribute__((noinline)) void* xnew(size_t n) {
  void* p = ::operator new(n);  // the throwing new: its detour is new's slow path
  std::memset(p, 0, n);         // a wrapper that does something after: not a tail call
  return p;
}

// Each site's body differs (an asm comment): identical functions may be
// folded into one, which would make them one site.
#define SITE(name, call)                              \
  __attribute__((noinline)) Node* name() {            \
    void* p = call(sizeof(Node));                     \
    asm volatile("# " #name ::"r"(p) : "memory");     \
    return static_cast<Node*>(p);                     \
  }
SITE(node_a, std::malloc)
SITE(node_b, std::malloc)
SITE(node_c, xnew)
SITE(node_d, xnew)
// Short-lived clutter of the same size class from sites of its own.
__attribute__((noinline)) void* clutter() { return std::malloc(36 + std::rand() % 5); }

constexpr int kLists = 4;
constexpr int kNodes = 20000;

struct List {
  Node* head = nullptr;
  Node* tail = nullptr;
  void append(Node* n, uint64_t v) {
    n->next = nullptr;
    n->value = v;
    std::memset(n->pad, static_cast<int>(v & 0xff), sizeof n->pad);
    if (tail) tail->next = n;
    else head = n;
    tail = n;
  }
};

bool check(const List& l, int which) {
  uint64_t i = 0;
  for (const Node* n = l.head; n != nullptr; n = n->next, ++i) {
    if (n->value != i * kLists + which) return false;
    for (char c : n->pad) {
      if (static_cast<unsigned char>(c) != (n->value & 0xff)) return false;
    }
  }
  return i == kNodes;
}

double adjacent_share(const List& l) {
  int adjacent = 0, links = 0;
  // Adjacent: one object's stride apart, which is its usable size (a 40-byte
  // node takes the 48-byte class).
  for (const Node* n = l.head; n != nullptr && n->next != nullptr; n = n->next, ++links) {
    adjacent += reinterpret_cast<uintptr_t>(n->next) - reinterpret_cast<uintptr_t>(n) == malloc_usable_size(const_cast<Node*>(n));
  }
  return links ? static_cast<double>(adjacent) / links : 0;
}

// Lists 2 and 3 came from operator new.
void free_list(List& l, bool from_new = false) {
  for (Node* n = l.head; n != nullptr;) {
    Node* next = n->next;
    if (from_new) ::operator delete(n);
    else std::free(n);
    n = next;
  }
  l.head = l.tail = nullptr;
}

void* free_two(void* arg) {
  auto* lists = static_cast<List*>(arg);
  free_list(lists[0]);
  free_list(lists[2], true);
  return nullptr;
}

}  // namespace

// With "hold": waits to be killed after its checks, its pools decided (for
// a daemon's view of them).
int main(int argc, char** argv) {
  List lists[kLists];
  void* junk[64] = {};
  for (int i = 0; i < kNodes; ++i) {
    lists[0].append(node_a(), uint64_t(i) * kLists + 0);
    void*& j = junk[std::rand() % 64];
    std::free(j);
    j = clutter();
    lists[1].append(node_b(), uint64_t(i) * kLists + 1);
    lists[2].append(node_c(), uint64_t(i) * kLists + 2);
    lists[3].append(node_d(), uint64_t(i) * kLists + 3);
  }
  for (void* j : junk) std::free(j);
  bool ok = true;
  for (int k = 0; k < kLists; ++k) {
    std::printf("list %d adjacent %.3f\n", k, adjacent_share(lists[k]));
    if (!check(lists[k], k)) {
      std::printf("list %d corrupt\n", k);
      ok = false;
    }
  }
  pthread_t t;
  if (pthread_create(&t, nullptr, free_two, lists) != 0 || pthread_join(t, nullptr) != 0) return 3;
  free_list(lists[1]);
  free_list(lists[3], true);
  // Again, after the remote frees: the pools' blocks serve the new lists.
  for (int i = 0; i < kNodes; ++i) {
    lists[0].append(node_a(), uint64_t(i) * kLists + 0);
    lists[2].append(node_c(), uint64_t(i) * kLists + 2);
  }
  ok = ok && check(lists[0], 0) && check(lists[2], 2);
  std::printf("again adjacent %.3f %.3f\n", adjacent_share(lists[0]), adjacent_share(lists[2]));
  free_list(lists[0]);
  free_list(lists[2], true);
  std::printf(ok ? "ok\n" : "FAILED\n");
  if (ok && argc > 1 && std::strcmp(argv[1], "hold") == 0) {
    std::fflush(stdout);
    for (;;) pause();
  }
  return ok ? 0 : 1;
}
