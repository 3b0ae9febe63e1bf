// Multithreaded allocation under whatever malloc is loaded (run with and
// without the memd shim; the output must be the same). Not linked to memd.
//
// Threads allocate with every interface (malloc, calloc, realloc, new[],
// aligned new, posix_memalign, aligned_alloc), stamp each object with its
// identity and a fill byte, verify it before every free, and hand some
// objects to the next thread through a queue (cross-thread frees). Queues
// outlive rounds: objects left in them are freed by the next round's threads,
// after their allocating thread has exited. Every decision comes from a
// per-thread seeded generator, never from timing, so the totals printed are
// deterministic; any corruption is counted and fails the run.
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "test_rng.h"

namespace {

constexpr int kThreads = 4;
constexpr int kRounds = 3;
constexpr int kOpsPerThread = 150000;
constexpr int kSlots = 2000;
constexpr int kShortLivedThreads = 48;

enum Kind : uint32_t { kMalloc, kCalloc, kNewArray, kAlignedNew, kPosixMemalign, kAlignedAlloc, kKinds };

// Every object starts with this header; the rest is filled with `fill`.
struct Header {
  uint64_t id;     // thread, round and sequence number: unique
  uint32_t size;   // requested bytes (>= sizeof(Header))
  uint32_t kind;   // how to free it
  uint32_t align;  // requested alignment (0: none)
  uint32_t fill;
};

std::atomic<uint64_t> g_errors{0};

void fail(const char* what, uint64_t id) {
  if (g_errors.fetch_add(1) < 20) fprintf(stderr, "mt_program: %s (object %" PRIx64 ")\n", what, id);
}


// In one round half the objects are large (best-fit chunks in shared
// blocks, freed remotely by the receiving thread): that heap has the most
// state to get wrong under cross-thread frees.
thread_local bool tl_large_heavy = false;

// Mostly small, some medium and large, rarely huge (page runs).
uint32_t pick_size(Rng& r) {
  if (tl_large_heavy && r.below(2) == 0) return 497 + r.below(32768 - 497 + 1);
  uint32_t c = r.below(1000);
  uint32_t s;
  if (c < 700) s = 1 + r.below(128);
  else if (c < 900) s = 128 + r.below(400);
  else if (c < 990) s = 512 + r.below(32768);
  else s = 32768 + r.below(1 << 20);
  return s < sizeof(Header) ? sizeof(Header) : s;
}

// Object identity -> a value both the producer and the checker can compute.
uint64_t mix(uint64_t id, uint32_t size) { return (id * 0x9e3779b97f4a7c15ull) ^ (uint64_t{size} << 17); }

void* allocate(Rng& r, uint64_t id, uint32_t size) {
  uint32_t kind = r.below(kKinds);
  uint32_t align = 0;
  void* p = nullptr;
  switch (kind) {
    case kMalloc: p = malloc(size); break;
    case kCalloc: {
      p = calloc(1, size);
      if (p == nullptr) break;
      const unsigned char* b = static_cast<unsigned char*>(p);
      for (uint32_t i = 0; i < size; ++i) {
        if (b[i] != 0) {
          fail("calloc memory not zero", id);
          break;
        }
      }
      break;
    }
    case kNewArray: p = new char[size]; break;
    case kAlignedNew:
      align = 32u << r.below(6);  // 32 .. 1024
      p = ::operator new(size, std::align_val_t{align});
      break;
    case kPosixMemalign:
      align = 8u << r.below(10);  // 8 .. 4096
      if (posix_memalign(&p, align, size) != 0) p = nullptr;
      break;
    case kAlignedAlloc:
      align = 16u << r.below(5);  // 16 .. 256
      p = aligned_alloc(align, size);
      break;
  }
  if (p == nullptr) {
    char what[96];
    snprintf(what, sizeof what, "allocation of %u bytes (kind %d) failed: %s", size, static_cast<int>(kind), strerror(errno));
    fail(what, id);
    return nullptr;
  }
  if (align != 0 && reinterpret_cast<uintptr_t>(p) % align != 0) {
    char what[96];
    snprintf(what, sizeof what, "misaligned: kind %u, align %u, size %u at %p", kind, align, size, p);
    fail(what, id);
  }
  Header* h = static_cast<Header*>(p);
  *h = {id, size, kind, align, static_cast<uint32_t>(mix(id, size) & 0xff)};
  memset(h + 1, static_cast<int>(h->fill), size - sizeof(Header));
  return p;
}

// Checks the header and fill; returns a checksum contribution.
uint64_t verify(const void* p, uint32_t valid_bytes) {
  const Header* h = static_cast<const Header*>(p);
  const unsigned char* b = static_cast<const unsigned char*>(p);
  uint32_t n = valid_bytes < h->size ? valid_bytes : h->size;
  for (uint32_t i = sizeof(Header); i < n; ++i) {
    if (b[i] != h->fill) {
      fail("object contents changed", h->id);
      break;
    }
  }
  return mix(h->id, h->size);
}

void release(void* p) {
  const Header* h = static_cast<const Header*>(p);
  switch (h->kind) {
    case kNewArray: delete[] static_cast<char*>(p); break;
    case kAlignedNew: ::operator delete(p, std::align_val_t{h->align}); break;
    default: free(p); break;
  }
}

// Grows or shrinks a malloc-family object with realloc, checking the kept
// prefix; new-family objects cannot be realloc'ed and are returned as is.
void* resize(Rng& r, void* p) {
  Header* h = static_cast<Header*>(p);
  if (h->kind == kNewArray || h->kind == kAlignedNew) return p;
  uint32_t size = pick_size(r);
  void* q = realloc(p, size);
  if (q == nullptr) {
    char what[96];
    snprintf(what, sizeof what, "realloc of %u to %u bytes failed: %s", h->size, size, strerror(errno));
    fail(what, h->id);
    return p;
  }
  h = static_cast<Header*>(q);
  verify(q, size);  // the common prefix must survive the move
  uint32_t old = h->size;
  h->size = size;
  h->kind = kMalloc;  // realloc'ed memory is plain malloc memory
  h->align = 0;
  if (size > old) memset(static_cast<char*>(q) + old, static_cast<int>(h->fill), size - old);
  return q;
}

struct Queue {
  std::mutex mu;
  std::deque<void*> items;
  uint64_t received = 0, checksum = 0;  // over the whole run: deterministic
};
Queue g_queues[kThreads];

void drain(Queue& q, Rng& r) {
  std::deque<void*> got;
  {
    std::lock_guard<std::mutex> lock(q.mu);
    got.swap(q.items);
  }
  uint64_t sum = 0;
  for (void* p : got) {
    sum += verify(p, UINT32_MAX);
    // Sometimes realloc a foreign object before freeing it.
    if (r.below(4) == 0) p = resize(r, p);
    release(p);
  }
  std::lock_guard<std::mutex> lock(q.mu);
  q.received += got.size();
  q.checksum += sum;
}

struct ThreadResult {
  uint64_t allocated = 0, freed_locally = 0, sent = 0, checksum = 0, containers = 0;
};

// Some std containers too: their nodes come from operator new.
uint64_t container_work(Rng& r) {
  std::map<uint32_t, std::string> m;
  std::vector<std::vector<uint32_t>> v;
  for (int i = 0; i < 400; ++i) {
    uint32_t k = r.below(1000);
    m[k] = std::string(k % 97 + 1, static_cast<char>('a' + k % 26));
    v.emplace_back(k % 50, k);
  }
  uint64_t sum = m.size();
  for (auto& [k, s] : m) sum = sum * 31 + k + s.size();
  for (auto& x : v) sum += x.size();
  return sum;
}

void worker(int round, int t, ThreadResult* out) {
  Rng r{uint64_t(round * 1000 + t + 1)};
  tl_large_heavy = round == 1;
  std::vector<void*> slots(kSlots, nullptr);
  Queue& next = g_queues[(t + 1) % kThreads];
  Rng drain_rng{uint64_t(round * 1000 + t + 500)};
  uint64_t seq = 0;
  for (int op = 0; op < kOpsPerThread; ++op) {
    uint32_t i = r.below(kSlots);
    void*& s = slots[i];
    if (s == nullptr) {
      uint64_t id = (uint64_t(round) << 56) | (uint64_t(t) << 48) | seq++;
      s = allocate(r, id, pick_size(r));
      out->allocated += s != nullptr;
      continue;
    }
    switch (r.below(8)) {
      case 0:
      case 1: {  // hand it over: the next thread frees it
        std::lock_guard<std::mutex> lock(next.mu);
        next.items.push_back(s);
        ++out->sent;
        s = nullptr;
        break;
      }
      case 2: s = resize(r, s); break;
      default:
        out->checksum += verify(s, UINT32_MAX);
        release(s);
        ++out->freed_locally;
        s = nullptr;
    }
    // The drain's own generator: how much is queued depends on timing, and
    // that must not shift this thread's (printed) decisions.
    if (op % 512 == 0) drain(g_queues[t], drain_rng);
    if (op % 20000 == 0) out->containers += container_work(r);
  }
  // Leave the queue to the next round; free what the slots still hold.
  for (void* p : slots) {
    if (p == nullptr) continue;
    out->checksum += verify(p, UINT32_MAX);
    release(p);
    ++out->freed_locally;
  }
}

// Many short threads: thread heaps attached and detached in quick
// succession, each freeing objects another (already gone) thread allocated.
void short_lived_threads() {
  std::vector<void*> handoff;
  for (int i = 0; i < kShortLivedThreads; ++i) {
    std::vector<void*> mine;
    std::thread th([&, i] {
      Rng r{uint64_t(7777 + i)};
      for (void* p : handoff) release(p);
      for (int k = 0; k < 300; ++k) mine.push_back(allocate(r, (uint64_t(99) << 56) | (uint64_t(i) << 20) | k, pick_size(r)));
    });
    th.join();
    handoff.swap(mine);
  }
  for (void* p : handoff) release(p);
}

}  // namespace

int main() {
  for (int round = 0; round < kRounds; ++round) {
    ThreadResult results[kThreads];
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, round, t, &results[t]);
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) {
      const ThreadResult& res = results[t];
      printf("round %d thread %d: allocated %" PRIu64 " freed %" PRIu64 " sent %" PRIu64
             " checksum %016" PRIx64 " containers %" PRIu64 "\n",
             round, t, res.allocated, res.freed_locally, res.sent, res.checksum, res.containers);
    }
  }
  Rng r{424242};
  for (Queue& q : g_queues) drain(q, r);  // the last round's leftovers
  for (int t = 0; t < kThreads; ++t) {
    printf("queue %d: received %" PRIu64 " checksum %016" PRIx64 "\n", t, g_queues[t].received,
           g_queues[t].checksum);
  }
  short_lived_threads();
  printf("short-lived threads: %d\n", kShortLivedThreads);
  uint64_t errors = g_errors.load();
  printf("errors %" PRIu64 "\n", errors);
  return errors == 0 ? 0 : 1;
}
