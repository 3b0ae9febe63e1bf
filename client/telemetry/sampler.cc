#include "client/telemetry/sampler.h"

#include <sched.h>
#include <time.h>

#include <atomic>

#include "absl/debugging/stacktrace.h"
#include "heap/sampling.h"

namespace memd::client::telemetry {
namespace {

// Sampling is rare (one allocation in thousands) and large frees check the
// table without it: a spin lock is enough.
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
  uint32_t counted_class;
  uint64_t counted_bytes;
  uintptr_t heap_base;
};

SpinLock lock;
// Open addressing keyed by address. Keys are read without the lock (every
// large free looks here); everything else is under it. `generation` is odd
// while the table is rebuilt, so a lock-free miss that raced a rebuild is
// retried under the lock.
std::atomic<uintptr_t> keys[kTableSize];
LiveSample values[kTableSize];
std::atomic<uint64_t> generation{0};
size_t live = 0, tombstones = 0;

// SamplingHooks::live_filter: a count per slot of the live samples there,
// written under the lock.
std::atomic<uint8_t> live_filter[heap::kSampleFilterSlots];

void filter_add(uintptr_t p) {
  std::atomic<uint8_t>& f = live_filter[heap::sample_filter_slot(reinterpret_cast<void*>(p))];
  uint8_t n = f.load(std::memory_order_relaxed);
  if (n != heap::kSampleFilterSaturated) f.store(n + 1, std::memory_order_relaxed);
}
void filter_remove(uintptr_t p) {
  std::atomic<uint8_t>& f = live_filter[heap::sample_filter_slot(reinterpret_cast<void*>(p))];
  uint8_t n = f.load(std::memory_order_relaxed);
  if (n != heap::kSampleFilterSaturated) f.store(n - 1, std::memory_order_relaxed);
}

memd_sample_event ring[kSampleBufferEvents];
size_t ring_head = 0, ring_count = 0;

uint64_t next_id = 1;
std::atomic<uint64_t> taken{0};
std::atomic<uint64_t> dropped{0};
std::atomic<uint64_t> period{0};

size_t slot_of(uintptr_t p) { return static_cast<size_t>(((p >> 4) * 0x9e3779b97f4a7c15ull) >> (64 - kTableBits)); }

// The slot holding p, or kTableSize. Lock-free.
size_t find(uintptr_t p) {
  for (size_t i = slot_of(p), n = 0; n < kTableSize; i = (i + 1) & (kTableSize - 1), ++n) {
    uintptr_t k = keys[i].load(std::memory_order_acquire);
    if (k == p) return i;
    if (k == kEmpty) return kTableSize;
  }
  return kTableSize;
}

// REQUIRES: lock held.
void rebuild() {
  static LiveSample kept_values[kLiveSampleCapacity];
  static uintptr_t kept_keys[kLiveSampleCapacity];
  size_t n = 0;
  for (size_t i = 0; i < kTableSize; ++i) {
    uintptr_t k = keys[i].load(std::memory_order_relaxed);
    if (k > kTombstone && n < kLiveSampleCapacity) {
      kept_keys[n] = k;
      kept_values[n++] = values[i];
    }
  }
  generation.fetch_add(1, std::memory_order_acq_rel);
  for (size_t i = 0; i < kTableSize; ++i) keys[i].store(kEmpty, std::memory_order_relaxed);
  for (size_t j = 0; j < n; ++j) {
    size_t i = slot_of(kept_keys[j]);
    while (keys[i].load(std::memory_order_relaxed) != kEmpty) i = (i + 1) & (kTableSize - 1);
    values[i] = kept_values[j];
    keys[i].store(kept_keys[j], std::memory_order_release);
  }
  generation.fetch_add(1, std::memory_order_acq_rel);
  live = n;
  tombstones = 0;
}

// REQUIRES: lock held. False if the table is full.
bool insert(uintptr_t p, const LiveSample& v) {
  if (live >= kLiveSampleCapacity) return false;
  if (live + tombstones >= kTableSize * 3 / 4) rebuild();
  size_t i = slot_of(p);
  for (;;) {
    uintptr_t k = keys[i].load(std::memory_order_relaxed);
    if (k == kEmpty || k == kTombstone) break;
    i = (i + 1) & (kTableSize - 1);
  }
  if (keys[i].load(std::memory_order_relaxed) == kTombstone) --tombstones;
  values[i] = v;
  keys[i].store(p, std::memory_order_release);
  filter_add(p);
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

void on_allocated(const heap::Region& r, void* p, size_t requested, uint32_t counted_class,
                  size_t counted_bytes) {
  // The stack first, outside the lock: the walk is the slow part.
  void* frames[MEMD_TELEMETRY_MAX_FRAMES];
  int depth = absl::GetStackTrace(frames, MEMD_TELEMETRY_MAX_FRAMES, 1);
  uint64_t t = now_ms();
  taken.fetch_add(1, std::memory_order_relaxed);
  Guard g(lock);
  uint64_t id = next_id++;
  auto base = reinterpret_cast<uintptr_t>(r.data);
  if (!insert(reinterpret_cast<uintptr_t>(p), {id, counted_class, counted_bytes, base})) {
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

bool on_freeing(const heap::Region& r, void* p, uint32_t* counted_class, size_t* counted_bytes) {
  auto key = reinterpret_cast<uintptr_t>(p);
  uint64_t gen = generation.load(std::memory_order_acquire);
  size_t i = find(key);
  if (i == kTableSize && (gen & 1) == 0 && generation.load(std::memory_order_acquire) == gen) return false;
  Guard g(lock);
  i = find(key);
  // Another region's object at the same address cannot be: addresses are
  // unique in a process while the object lives.
  if (i == kTableSize) return false;
  LiveSample v = values[i];
  keys[i].store(kTombstone, std::memory_order_release);
  filter_remove(key);
  --live;
  ++tombstones;
  *counted_class = v.counted_class;
  *counted_bytes = v.counted_bytes;
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
  return true;
}

const heap::SamplingHooks hooks{on_allocated, on_freeing, live_filter};

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
