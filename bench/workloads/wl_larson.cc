// wl_larson: the larson server benchmark (Larson and Krishnan, "Memory
// allocation for long-running server applications", ISMM 1998), written anew
// from its description.
//
// Each of T chains owns an array of slots. A chain's thread repeatedly frees
// a random slot and allocates an object of 10–100 B into it. When its quota is
// done, the thread starts its successor, which inherits the array, and exits:
// the successor frees objects allocated by a thread that no longer exists, and
// threads of different chains are born and die out of step, as connections of
// a server come and go. The main thread allocates the arrays' first contents,
// so even the first generation's frees are remote frees.
//
// Where it differs from wl_threads_churn: threads are short-lived (hundreds
// of generations, each started by its predecessor, not by a barrier in main),
// so creating and tearing down a thread's allocator state is a large part of
// the work.
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "common.h"

namespace {

constexpr size_t kSlots = 4000;                // live objects per chain
constexpr uint64_t kOpsPerGeneration = 8'000;  // frees + mallocs per thread
constexpr uint64_t kGenerations = 300;         // threads per chain, at scale 1
constexpr size_t kMinSize = 10;
constexpr size_t kMaxSize = 100;

struct Slot {
  void* ptr = nullptr;
  uint32_t size = 0;
  uint64_t tag = 0;
};

// A chain's state passes from each thread to its successor; thread creation
// and join order the accesses, so it needs no lock.
struct Chain {
  std::vector<Slot> slots = std::vector<Slot>(kSlots);
  std::vector<std::thread> threads;  // one per generation, each joined by the next
  uint64_t hash = 0;
  wl::LiveBytes live;
  int index = 0;
};

// Starts the first generation of every chain at once, and tells main when
// every chain's last generation is done.
struct Control {
  std::atomic<bool> go{false};
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
};

void put(Slot& s, wl::Rng& rng, wl::LiveBytes& live) {
  s.size = static_cast<uint32_t>(rng.range(kMinSize, kMaxSize));
  s.tag = rng.next();
  s.ptr = wl::xmalloc(s.size);
  wl::fill(s.ptr, s.size, s.tag);
  live.add(s.size);
}

void generation(Chain& c, uint64_t gen, Control& control) {
  // Every thread is joined, so none is still tearing down its allocator
  // state when the process exits. Thread gen-1's handle was stored before
  // this thread was started (by main, after which it set `go`, or by thread
  // gen-2, which thread gen-1 joined first).
  if (gen == 0) {
    while (!control.go.load(std::memory_order_acquire)) std::this_thread::yield();
  } else {
    c.threads[gen - 1].join();
  }
  wl::Rng rng(0x1A5505ull * (gen + 1) + static_cast<uint64_t>(c.index));
  for (uint64_t i = 0; i < kOpsPerGeneration; ++i) {
    Slot& s = c.slots[rng.below(kSlots)];
    if (wl::read_tag(s.ptr, s.size) != wl::expected_tag(s.tag, s.size)) wl::die("object corrupted");
    c.hash = wl::mix(c.hash, s.tag);
    std::free(s.ptr);
    c.live.sub(s.size);
    put(s, rng, c.live);
  }
  if (gen + 1 < c.threads.size()) {
    c.threads[gen + 1] = std::thread(generation, std::ref(c), gen + 1, std::ref(control));
    return;
  }
  std::lock_guard lock(control.mu);
  ++control.done;
  control.cv.notify_one();
}

}  // namespace

int main(int argc, char** argv) {
  wl::Args args = wl::parse_args(argc, argv, 2, true);
  uint64_t generations = wl::scaled(kGenerations, args.scale);

  std::vector<Chain> chains(args.threads);
  for (int t = 0; t < args.threads; ++t) {
    Chain& c = chains[t];
    c.index = t;
    c.threads.resize(generations);
    c.live.add(kSlots * sizeof(Slot));  // the slot array is live data too
    wl::Rng rng(0xF111ull + static_cast<uint64_t>(t));
    for (Slot& s : c.slots) put(s, rng, c.live);
  }

  Control control;
  for (Chain& c : chains) c.threads[0] = std::thread(generation, std::ref(c), 0, std::ref(control));
  control.go.store(true, std::memory_order_release);
  {
    std::unique_lock lock(control.mu);
    control.cv.wait(lock, [&] { return control.done == args.threads; });
  }
  for (Chain& c : chains) c.threads.back().join();

  uint64_t checksum = 0;
  size_t peak = 0;
  for (Chain& c : chains) {
    for (Slot& s : c.slots) {
      checksum = wl::mix(checksum, wl::read_tag(s.ptr, s.size));
      std::free(s.ptr);
    }
    checksum = wl::mix(checksum, c.hash);
    peak += c.live.peak();  // chains reach their (constant) window together
  }
  wl::report(checksum, peak);
  return 0;
}
