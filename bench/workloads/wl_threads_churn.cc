// wl_threads_churn: T threads churning small objects (larson / threadtest).
//
// Each thread owns a window of a few thousand slots and repeatedly replaces a
// random slot with a fresh 8–128 B object. Like larson, the work runs in
// rounds: at the end of a round the threads exit and the next round's thread i
// inherits window i, so it frees objects another (dead) thread allocated —
// that exercises thread-cache teardown and remote frees, not just the fast path.
#include <thread>
#include <vector>

#include "common.h"

namespace {

constexpr size_t kWindow = 4000;  // live objects per thread
constexpr int kRounds = 10;
constexpr uint64_t kOpsPerRound = 600'000;   // per thread, at scale 1

struct Slot {
  void* ptr = nullptr;
  uint32_t size = 0;
  uint64_t tag = 0;
};

// Per-thread state, kept apart so the accounting adds no shared cache lines.
struct Window {
  std::vector<Slot> slots = std::vector<Slot>(kWindow);
  uint64_t hash = 0;
  wl::LiveBytes live;
};

void churn(Window& w, uint64_t seed, uint64_t ops) {
  wl::Rng rng(seed);
  for (uint64_t i = 0; i < ops; ++i) {
    Slot& s = w.slots[rng.below(kWindow)];
    if (s.ptr != nullptr) {
      if (wl::read_tag(s.ptr, s.size) != wl::expected_tag(s.tag, s.size)) wl::die("object corrupted");
      w.hash = wl::mix(w.hash, s.tag);
      std::free(s.ptr);
      w.live.sub(s.size);
    }
    s.size = static_cast<uint32_t>(rng.range(8, 128));
    s.tag = rng.next();
    s.ptr = wl::xmalloc(s.size);
    wl::fill(s.ptr, s.size, s.tag);
    w.live.add(s.size);
  }
}

}  // namespace

int main(int argc, char** argv) {
  wl::Args args = wl::parse_args(argc, argv, 2, true);
  uint64_t ops = wl::scaled(kOpsPerRound, args.scale);

  std::vector<Window> windows(args.threads);
  for (auto& w : windows) w.live.add(kWindow * sizeof(Slot));  // the slot array is live data too

  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::thread> threads;
    for (int t = 0; t < args.threads; ++t) {
      uint64_t seed = 1000003ull * static_cast<uint64_t>(round) + static_cast<uint64_t>(t) + 1;
      threads.emplace_back(churn, std::ref(windows[t]), seed, ops);
    }
    for (auto& th : threads) th.join();
  }

  uint64_t checksum = 0;
  size_t peak = 0;
  for (auto& w : windows) {
    for (Slot& s : w.slots) {
      if (s.ptr != nullptr) checksum = wl::mix(checksum, wl::read_tag(s.ptr, s.size));
      std::free(s.ptr);
    }
    checksum = wl::mix(checksum, w.hash);
    // Threads reach their steady-state window together, so the sum of the
    // per-thread peaks is the simultaneous peak (and an upper bound on it).
    peak += w.live.peak();
  }
  wl::report(checksum, peak);
  return 0;
}
