#include "client/telemetry/sampler.h"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <iterator>

#include "absl/debugging/stacktrace.h"
#include "heap/sampling.h"

namespace memd::client::telemetry {
namespace {

// Sampling is rare (one allocation in thousands), and only the frees of
// sampled objects (marked by the heap) come here: a spin lock is enough.
class SpinLock {
 public:
  void lock() {
    while (flag_.exchange(true, std::memory_order_acquire)) {
      while (flag_.load(std::memory_order_relaxed)) sched_yield();
    }
  }
  void unlock() { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

struct Guard {
  explicit Guard(SpinLock& l) : l_(l) { l_.lock(); }
  ~Guard() { l_.unlock(); }
  SpinLock& l_;
};

constexpr size_t kTableBits = 14;
constexpr size_t kTableSize = size_t{1} << kTableBits;  // twice the live capacity
static_assert(kTableSize >= 2 * kLiveSampleCapacity);
constexpr uintptr_t kEmpty = 0;
constexpr uintptr_t kTombstone = 1;

struct LiveSample {
  uint64_t id;
  uint64_t counted_bytes;
  uintptr_t heap_base;
};

// All under the lock: open addressing keyed by address.
SpinLock lock;
uintptr_t keys[kTableSize];
LiveSample values[kTableSize];
size_t live = 0, tombstones = 0;

memd_sample_event ring[kSampleBufferEvents];
size_t ring_head = 0, ring_count = 0;

uint64_t next_id = 1;
std::atomic<uint64_t> taken{0};
std::atomic<uint64_t> dropped{0};
std::atomic<uint64_t> period{0};

size_t slot_of(uintptr_t p) { return static_cast<size_t>(((p >> 4) * 0x9e3779b97f4a7c15ull) >> (64 - kTableBits)); }

// REQUIRES: lock held. The slot holding p, or kTableSize.
size_t find(uintptr_t p) {
  for (size_t i = slot_of(p), n = 0; n < kTableSize; i = (i + 1) & (kTableSize - 1), ++n) {
    if (keys[i] == p) return i;
    if (keys[i] == kEmpty) return kTableSize;
  }
  return kTableSize;
}

// REQUIRES: lock held. Drops the tombstones.
void rebuild() {
  static LiveSample kept_values[kLiveSampleCapacity];
  static uintptr_t kept_keys[kLiveSampleCapacity];
  size_t n = 0;
  for (size_t i = 0; i < kTableSize; ++i) {
    if (keys[i] > kTombstone && n < kLiveSampleCapacity) {
      kept_keys[n] = keys[i];
      kept_values[n++] = values[i];
    }
  }
  std::fill(std::begin(keys), std::end(keys), kEmpty);
  for (size_t j = 0; j < n; ++j) {
    size_t i = slot_of(kept_keys[j]);
    while (keys[i] != kEmpty) i = (i + 1) & (kTableSize - 1);
    values[i] = kept_values[j];
    keys[i] = kept_keys[j];
  }
  live = n;
  tombstones = 0;
}

// REQUIRES: lock held. False if the table is full.
bool insert(uintptr_t p, const LiveSample& v) {
  if (live >= kLiveSampleCapacity) return false;
  if (live + tombstones >= kTableSize * 3 / 4) rebuild();
  size_t i = slot_of(p);
  while (keys[i] > kTombstone) i = (i + 1) & (kTableSize - 1);
  if (keys[i] == kTombstone) --tombstones;
  values[i] = v;
  keys[i] = p;
  ++live;
  return true;
}

// Events carry milliseconds: the coarse clock (a few ms of resolution) is
// good enough and costs a fraction of the precise one.
uint64_t now_ms() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

// REQUIRES: lock held. nullptr (and a drop counted) if the buffer is full.
memd_sample_event* push_event() {
  if (ring_count == kSampleBufferEvents) {
    dropped.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  memd_sample_event* e = &ring[(ring_head + ring_count) % kSampleBufferEvents];
  ++ring_count;
  return e;
}

void on_allocated(const heap::Region& r, void* p, size_t requested, size_t counted_bytes) {
  // The stack first, outside the lock: the walk is the slow part.
  void* frames[MEMD_TELEMETRY_MAX_FRAMES];
  int depth = absl::GetStackTrace(frames, MEMD_TELEMETRY_MAX_FRAMES, 1);
  uint64_t t = now_ms();
  taken.fetch_add(1, std::memory_order_relaxed);
  Guard g(lock);
  uint64_t id = next_id++;
  auto base = reinterpret_cast<uintptr_t>(r.data);
  if (!insert(reinterpret_cast<uintptr_t>(p), {id, counted_bytes, base})) {
    // Untracked, its free would go unseen: better not reported at all.
    dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  memd_sample_event* e = push_event();
  if (e == nullptr) return;
  e->kind = MEMD_SAMPLE_ALLOC;
  e->id = id;
  e->heap_base = base;
  e->address = reinterpret_cast<uintptr_t>(p);
  e->requested_bytes = requested;
  e->allocated_bytes = counted_bytes;
  e->time_ms = t;
  e->frame_count = static_cast<uint8_t>(depth < 0 ? 0 : depth);
  for (int i = 0; i < e->frame_count; ++i) e->frames[i] = reinterpret_cast<uintptr_t>(frames[i]);
}

void on_freeing(const heap::Region& r, void* p) {
  auto key = reinterpret_cast<uintptr_t>(p);
  Guard g(lock);
  size_t i = find(key);
  // Not in the table: another process's sample of a shared region (or one
  // this process could not keep). Its free is reported all the same, for
  // the daemon to match with whoever sampled it (id 0: not ours).
  LiveSample v{};
  if (i != kTableSize) {
    v = values[i];
    keys[i] = kTombstone;
    --live;
    ++tombstones;
  }
  if (memd_sample_event* e = push_event()) {
    e->kind = MEMD_SAMPLE_FREE;
    e->id = v.id;
    e->heap_base = reinterpret_cast<uintptr_t>(r.data);
    e->address = key;
    e->requested_bytes = 0;
    e->allocated_bytes = v.counted_bytes;
    e->time_ms = now_ms();
    e->frame_count = 0;
  }
}

const heap::SamplingHooks hooks{on_allocated, on_freeing};

}  // namespace

void enable_sampling(uint64_t period_bytes) {
  period.store(period_bytes, std::memory_order_relaxed);
  // The hooks stay once installed: samples taken before sampling was turned
  // off must still have their frees seen.
  heap::set_sampling(&hooks, period_bytes);
}

uint64_t sampling_period_bytes() { return period.load(std::memory_order_relaxed); }

size_t drain_sample_events(memd_sample_event* out, size_t max) {
  Guard g(lock);
  size_t n = 0;
  while (n < max && ring_count > 0) {
    out[n++] = ring[ring_head];
    ring_head = (ring_head + 1) % kSampleBufferEvents;
    --ring_count;
  }
  return n;
}

SamplerCounts sampler_counts() {
  Guard g(lock);
  return {taken.load(std::memory_order_relaxed), dropped.load(std::memory_order_relaxed), live};
}

}  // namespace memd::client::telemetry
