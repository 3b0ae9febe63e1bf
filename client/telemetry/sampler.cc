#include "client/telemetry/sampler.h"

#include <sched.h>
#include <time.h>

#include <atomic>
#include <cstdint>

#include "client/frame_pointers.h"
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

// All under the lock. One atomic operation per event (taking the lock) is
// most of what an event costs: counts that could be atomics of their own are
// kept under it instead.
SpinLock lock;
memd_sample_event ring[kSampleBufferEvents];
size_t ring_head = 0, ring_count = 0;
uint64_t next_id = 1;
uint64_t taken = 0;
uint64_t dropped = 0;

std::atomic<uint64_t> period{0};

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
    ++dropped;
    return nullptr;
  }
  memd_sample_event* e = &ring[(ring_head + ring_count) % kSampleBufferEvents];
  ++ring_count;
  return e;
}

// The return addresses of the calling stack, by its frame pointers
// (client/frame_pointers.h; the shim carries this). out[0] is the return
// address into the caller of the function that called this one (whose own
// frame and this one's are skipped).
__attribute__((noinline, no_sanitize("address", "thread"))) int caller_stack(void** out, int max) {
  auto* fp = static_cast<uintptr_t*>(__builtin_frame_address(0));
  int n = 0, skip = 2;
  while (fp != nullptr && n < max) {
    uintptr_t ra = fp[1];
    if (ra == 0) break;
    if (skip > 0) {
      --skip;
    } else {
      out[n++] = reinterpret_cast<void*>(ra);
    }
    fp = caller_frame(fp);
  }
  return n;
}

__attribute__((noinline)) void on_allocated(const heap::Region& r, void* p, size_t requested, size_t counted_bytes) {
  // The stack first, outside the lock: the walk is the slow part.
  void* frames[MEMD_TELEMETRY_MAX_FRAMES];
  int depth = caller_stack(frames, MEMD_TELEMETRY_MAX_FRAMES);
  uint64_t t = now_ms();
  Guard g(lock);
  ++taken;
  memd_sample_event* e = push_event();
  if (e == nullptr) return;
  e->kind = MEMD_SAMPLE_ALLOC;
  e->id = next_id++;
  e->heap_base = reinterpret_cast<uintptr_t>(r.data);
  e->address = reinterpret_cast<uintptr_t>(p);
  e->requested_bytes = requested;
  e->allocated_bytes = counted_bytes;
  e->time_ms = t;
  e->frame_count = static_cast<uint8_t>(depth < 0 ? 0 : depth);
  for (int i = 0; i < e->frame_count; ++i) e->frames[i] = reinterpret_cast<uintptr_t>(frames[i]);
}

// The heap calls this for marked objects only, so every call is the end of
// a sample: this process's, or (an object of a shared region) another's.
// The daemon matches it with the sample by region and address, which no
// live object shares, so no table of live samples is kept here.
void on_freeing(const heap::Region& r, void* p) {
  Guard g(lock);
  memd_sample_event* e = push_event();
  if (e == nullptr) return;
  e->kind = MEMD_SAMPLE_FREE;
  e->id = 0;
  e->heap_base = reinterpret_cast<uintptr_t>(r.data);
  e->address = reinterpret_cast<uintptr_t>(p);
  e->requested_bytes = 0;
  e->allocated_bytes = 0;
  e->time_ms = 0;  // a free's time is not reported: no clock read
  e->frame_count = 0;
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
  return {taken, dropped};
}

}  // namespace memd::client::telemetry
