// Telemetry in the heap, without a daemon: the counters every thread heap
// keeps, and allocation sampling (heap/sampling.h with the client's sampler).
// No gRPC here, so the sanitizer builds see all of it.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <dlfcn.h>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "client/heap.h"
#include "client/telemetry/sampler.h"
#include "heap/sampling.h"
#include "heap/size_class.h"
#include "tests/support/large_range.h"

namespace memd {
namespace {

using client::telemetry::drain_sample_events;
using client::telemetry::enable_sampling;
using client::telemetry::sampler_counts;

std::vector<memd_sample_event> drain_all() {
  std::vector<memd_sample_event> out;
  std::vector<memd_sample_event> buf(client::telemetry::kSampleBufferEvents);
  for (;;) {
    size_t n = drain_sample_events(buf.data(), buf.size());
    out.insert(out.end(), buf.begin(), buf.begin() + static_cast<long>(n));
    if (n < buf.size()) return out;
  }
}

class TelemetryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("MEMD_QUIET", "1", 1);
    enable_sampling(0);
    drain_all();
    auto h = Heap::create();
    ASSERT_TRUE(h.ok()) << h.status();
    heap_ = std::move(*h);
  }
  void TearDown() override {
    enable_sampling(0);
    heap_.reset();
    drain_all();
  }
  std::unique_ptr<Heap> heap_;
};

uint64_t total_allocs(const heap::CounterSnapshot& c) {
  uint64_t n = c.large.allocs + c.huge.allocs;
  for (const auto& k : c.classes) n += k.allocs;
  return n;
}
uint64_t total_frees(const heap::CounterSnapshot& c) {
  uint64_t n = c.large.frees + c.huge.frees;
  for (const auto& k : c.classes) n += k.frees;
  return n;
}

TEST_F(TelemetryTest, CountersCountEveryAllocationAndFreeByClass) {
  // A heap with large sizes (16-32 KiB), so that every kind is counted.
  heap_ = std::move(Heap::create(HeapOptions{.params = testing::params_with_large_range()}).value());
  std::vector<void*> small, large, huge;
  for (int i = 0; i < 1000; ++i) small.push_back(heap_->alloc(24));  // class 32
  for (int i = 0; i < 300; ++i) small.push_back(heap_->alloc(100));  // class 112
  for (int i = 0; i < 70; ++i) small.push_back(heap_->alloc(5000));  // class 5120
  for (int i = 0; i < 50; ++i) large.push_back(heap_->alloc(20000));
  for (int i = 0; i < 3; ++i) huge.push_back(heap_->alloc(1 << 20));
  heap::CounterSnapshot c = heap_->counters();
  EXPECT_EQ(c.classes[32 / heap::kGranule].allocs, 1000u);
  EXPECT_EQ(c.classes[112 / heap::kGranule].allocs, 300u);
  EXPECT_EQ(c.classes[heap::SizeClasses::class_of(5120)].allocs, 70u);
  EXPECT_EQ(c.large.allocs, 50u);
  EXPECT_GE(c.large.alloc_bytes, 50u * 20000);
  EXPECT_EQ(c.huge.allocs, 3u);
  EXPECT_GE(c.huge.alloc_bytes, 3u << 20);
  EXPECT_EQ(total_frees(c), 0u);
  for (void* p : small) heap_->free(p);
  for (void* p : large) heap_->free(p);
  for (void* p : huge) heap_->free(p);
  c = heap_->counters();
  EXPECT_EQ(c.classes[32 / heap::kGranule].frees, 1000u);
  EXPECT_EQ(c.classes[112 / heap::kGranule].frees, 300u);
  EXPECT_EQ(c.classes[heap::SizeClasses::class_of(5000)].frees, 70u);
  EXPECT_EQ(c.large.frees, 50u);
  EXPECT_EQ(c.large.freed_bytes, c.large.alloc_bytes);
  EXPECT_EQ(c.huge.frees, 3u);
  EXPECT_EQ(c.huge.freed_bytes, c.huge.alloc_bytes);
  EXPECT_EQ(c.samples, 0u);  // sampling is off
}

// With the default boundaries, 16-64 KiB objects are of size classes.
TEST_F(TelemetryTest, ObjectsUpToSixtyFourKiBAreCountedInTheirClasses) {
  std::vector<void*> v;
  for (int i = 0; i < 50; ++i) v.push_back(heap_->alloc(20000));
  for (int i = 0; i < 40; ++i) v.push_back(heap_->alloc(65536));
  heap::CounterSnapshot c = heap_->counters();
  EXPECT_EQ(c.classes[heap::SizeClasses::class_of(20480)].allocs, 50u);
  EXPECT_EQ(c.classes[heap::SizeClasses::class_of(65536)].allocs, 40u);
  EXPECT_EQ(c.large.allocs + c.huge.allocs, 0u);
  for (void* p : v) heap_->free(p);
  c = heap_->counters();
  EXPECT_EQ(c.classes[heap::SizeClasses::class_of(20000)].frees, 50u);
  EXPECT_EQ(c.classes[heap::SizeClasses::class_of(65536)].frees, 40u);
}

TEST_F(TelemetryTest, CountersAreCumulativeAcrossThreadsThatComeAndGo) {
  constexpr int kThreads = 4, kEach = 5000;
  for (int round = 0; round < 3; ++round) {
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t) {
      ts.emplace_back([&] {
        std::vector<void*> v;
        for (int i = 0; i < kEach; ++i) v.push_back(heap_->alloc(16 + (i % 7) * 8));
        for (void* p : v) heap_->free(p);
      });
    }
    for (auto& t : ts) t.join();
  }
  heap::CounterSnapshot c = heap_->counters();
  EXPECT_EQ(total_allocs(c), uint64_t{3} * kThreads * kEach);
  EXPECT_EQ(total_frees(c), uint64_t{3} * kThreads * kEach);
}

TEST_F(TelemetryTest, CountersReadWhileThreadsComeAndGoNeverGoBack) {
  // A thread that takes an owner slot after another left it initializes
  // the slot's heap again; its counts must carry on from the last thread's,
  // as a reporter reading them at any moment sees (Prometheus would take a
  // drop for a counter reset).
  constexpr int kRounds = 20, kThreads = 3, kEach = 2000;
  std::atomic<bool> done{false};
  uint64_t drops = 0, reads = 0;
  std::thread reader([&] {
    uint64_t last_allocs = 0, last_frees = 0;
    while (!done.load(std::memory_order_acquire)) {
      heap::CounterSnapshot c = heap_->counters();
      uint64_t a = total_allocs(c), f = total_frees(c);
      if (a < last_allocs || f < last_frees) ++drops;
      last_allocs = a;
      last_frees = f;
      ++reads;
    }
  });
  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t) {
      ts.emplace_back([&, t] {
        std::vector<void*> v;
        for (int i = 0; i < kEach; ++i) v.push_back(heap_->alloc(8 + ((i + t) % 64) * 8));
        for (void* p : v) heap_->free(p);
      });
    }
    for (auto& t : ts) t.join();
  }
  done.store(true, std::memory_order_release);
  reader.join();
  EXPECT_EQ(drops, 0u) << "of " << reads << " reads";
  EXPECT_GT(reads, 0u);
  heap::CounterSnapshot c = heap_->counters();
  EXPECT_EQ(total_allocs(c), uint64_t{kRounds} * kThreads * kEach);
  EXPECT_EQ(total_frees(c), uint64_t{kRounds} * kThreads * kEach);
}

// Checks that the events, in the order drained, end every sample exactly
// once: each free is of an address sampled and not freed since, and nothing
// sampled is left live. Returns how many samples there were.
size_t expect_each_sample_freed_once(const std::vector<memd_sample_event>& events) {
  std::set<uintptr_t> live;
  size_t samples = 0;
  for (const memd_sample_event& e : events) {
    if (e.kind == MEMD_SAMPLE_ALLOC) {
      ++samples;
      EXPECT_TRUE(live.insert(e.address).second) << "sampled twice while live: " << e.address;
    } else {
      EXPECT_EQ(live.erase(e.address), 1u) << "a free of no live sample: " << e.address;
    }
  }
  EXPECT_TRUE(live.empty()) << live.size() << " samples never freed";
  return samples;
}

TEST_F(TelemetryTest, SamplesAboutOnePerPeriodAndReportsEachFree) {
  constexpr uint64_t kPeriod = 64 << 10;
  uint64_t dropped_before = sampler_counts().dropped;
  enable_sampling(kPeriod);
  std::mt19937 rng(7);
  std::vector<std::pair<unsigned char*, size_t>> live;
  uint64_t bytes = 0;
  std::vector<memd_sample_event> events;
  for (int i = 0; i < 200000; ++i) {
    size_t size = 16 + rng() % 2000;
    auto* p = static_cast<unsigned char*>(heap_->alloc(size));
    ASSERT_NE(p, nullptr);
    std::memset(p, 0x5a, size);  // a sampled object is as usable as any
    live.push_back({p, size});
    bytes += size;
    if (live.size() > 5000) {
      size_t k = rng() % live.size();
      heap_->free(live[k].first);
      live[k] = live.back();
      live.pop_back();
    }
    if (i % 10000 == 0) {  // keep the buffer from filling
      std::vector<memd_sample_event> e = drain_all();
      events.insert(events.end(), e.begin(), e.end());
    }
  }
  std::vector<memd_sample_event> last = drain_all();
  events.insert(events.end(), last.begin(), last.end());
  for (auto [p, size] : live) {
    for (size_t j = 0; j < size; ++j) ASSERT_EQ(p[j], 0x5a);
    heap_->free(p);
  }
  std::vector<memd_sample_event> frees_after = drain_all();
  events.insert(events.end(), frees_after.begin(), frees_after.end());
  ASSERT_TRUE(heap_->check().ok()) << heap_->check();

  for (const memd_sample_event& e : events) {
    if (e.kind == MEMD_SAMPLE_ALLOC) {
      EXPECT_GE(e.requested_bytes, 16u);
      EXPECT_GT(e.frame_count, 0);
    }
  }
  EXPECT_EQ(sampler_counts().dropped, dropped_before) << "the check below needs every event";
  // Every object was freed in the end: every sample's free was seen.
  size_t samples = expect_each_sample_freed_once(events);
  // Poisson with mean bytes / period (about 3,200): far inside these bounds.
  double expected = static_cast<double>(bytes) / kPeriod;
  EXPECT_GT(static_cast<double>(samples), expected * 0.7) << bytes << " bytes";
  EXPECT_LT(static_cast<double>(samples), expected * 1.3);
  // A sampled object is counted in its own class, at allocation and at free.
  heap::CounterSnapshot c = heap_->counters();
  EXPECT_EQ(c.samples, samples);
  EXPECT_EQ(total_allocs(c), total_frees(c));
}

// Thread heaps made and used while sampling was off (as the shim's first is,
// by libstdc++'s constructor before the shim's turns sampling on) sample at
// the period from when it is turned on: N bytes in objects of s bytes give
// N/s * (1 - e^(-s/period)) samples, not none until their countdowns of
// sampling-off run out.
TEST_F(TelemetryTest, ThreadHeapsMadeWhileSamplingWasOffSampleAtThePeriodOnceItIsOn) {
  // The shortest period sampled exactly from the next allocation on.
  constexpr uint64_t kPeriod = heap::kSamplingProbeBytes;
  // 48 MiB per thread: before the fix, sampling-off countdowns of 64 MiB
  // outlasted it, and nothing was sampled.
  constexpr size_t kObject = 1024, kObjectsPerThread = 48 << 10;
  constexpr int kThreads = 2;
  std::atomic<int> made{0};
  std::atomic<bool> on{false};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&] {
      // This thread's heap, made now and used a little while sampling is off.
      std::vector<void*> before;
      for (int i = 0; i < 100; ++i) before.push_back(heap_->alloc(kObject));
      made.fetch_add(1);
      while (!on.load()) std::this_thread::yield();
      for (size_t i = 0; i < kObjectsPerThread; ++i) heap_->free(heap_->alloc(kObject));
      for (void* p : before) heap_->free(p);
    });
  }
  while (made.load() < kThreads) std::this_thread::yield();
  EXPECT_EQ(heap_->counters().samples, 0u);
  enable_sampling(kPeriod);
  on = true;
  for (auto& t : ts) t.join();
  enable_sampling(0);
  // Each allocation is sampled independently: binomial, so within five
  // standard deviations (sqrt(expected), about 25% of it here) but for one
  // run in millions.
  double p = -std::expm1(-static_cast<double>(kObject) / kPeriod);
  double expected = static_cast<double>(kThreads * kObjectsPerThread) * p;
  EXPECT_NEAR(static_cast<double>(heap_->counters().samples), expected, 5 * std::sqrt(expected));
  EXPECT_TRUE(heap_->check().ok()) << heap_->check();
}

__attribute__((noinline)) void* allocate_here(Heap* h, size_t size) {
  void* p = h->alloc(size);
  asm volatile("" ::: "memory");  // not a tail call: this frame stays on the stack
  return p;
}

TEST_F(TelemetryTest, ASampleCarriesTheStackOfItsCaller) {
  enable_sampling(1);  // every allocation
  void* p = allocate_here(heap_.get(), 100);
  enable_sampling(0);
  std::vector<memd_sample_event> events = drain_all();
  ASSERT_EQ(events.size(), 1u);
  const memd_sample_event& e = events[0];
  EXPECT_EQ(e.address, reinterpret_cast<uintptr_t>(p));
  EXPECT_EQ(e.requested_bytes, 100u);
  // One of the frames returns into allocate_here.
  auto begin = reinterpret_cast<uintptr_t>(&allocate_here);
  bool found = false;
  for (int i = 0; i < e.frame_count; ++i) found |= e.frames[i] > begin && e.frames[i] < begin + 256;
  EXPECT_TRUE(found) << e.frame_count << " frames, none in allocate_here";
  heap_->free(p);
  events = drain_all();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, MEMD_SAMPLE_FREE);
  EXPECT_EQ(events[0].address, reinterpret_cast<uintptr_t>(p));
}

TEST_F(TelemetryTest, SampledObjectsResizeAndAlignLikeAnyOther) {
  enable_sampling(1);
  for (size_t size : {1u, 16u, 100u, 496u, 497u, 5000u, 40000u, 300000u}) {
    auto* p = static_cast<unsigned char*>(heap_->alloc(size));
    ASSERT_NE(p, nullptr);
    EXPECT_GE(heap_->size(p), size);
    std::memset(p, 1, size);
    p = static_cast<unsigned char*>(heap_->resize(p, size * 3));
    ASSERT_NE(p, nullptr);
    for (size_t j = 0; j < size; ++j) ASSERT_EQ(p[j], 1);
    heap_->free(p);
    void* a = heap_->alloc_aligned(size, 256);
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 256, 0u);
    heap_->free(a);
    auto* z = static_cast<unsigned char*>(heap_->alloc_zeroed(size));
    for (size_t j = 0; j < size; ++j) ASSERT_EQ(z[j], 0);
    heap_->free(z);
  }
  enable_sampling(0);
  EXPECT_TRUE(heap_->check().ok()) << heap_->check();
  std::vector<memd_sample_event> events = drain_all();
  size_t allocs = 0, frees = 0;
  for (const auto& e : events) ++(e.kind == MEMD_SAMPLE_ALLOC ? allocs : frees);
  EXPECT_GT(allocs, 8u);
  EXPECT_EQ(allocs, frees);
}

TEST_F(TelemetryTest, AFullBufferDropsAndCountsInsteadOfWaiting) {
  enable_sampling(1);
  uint64_t dropped_before = sampler_counts().dropped;
  std::vector<void*> v;
  for (size_t i = 0; i < client::telemetry::kSampleBufferEvents + 500; ++i) v.push_back(heap_->alloc(32));
  enable_sampling(0);
  EXPECT_GE(sampler_counts().dropped - dropped_before, 500u);
  EXPECT_EQ(drain_all().size(), client::telemetry::kSampleBufferEvents);
  for (void* p : v) heap_->free(p);
  EXPECT_TRUE(heap_->check().ok());
}

TEST_F(TelemetryTest, SamplesWhoseEventsAreDroppedAreStillCountedInTheirClass) {
  // Past a full buffer the sampler records no more; the heap still counts
  // the frees of those samples as it counted their allocations.
  constexpr size_t kObjects = client::telemetry::kSampleBufferEvents + 300;
  const uint32_t cls = heap::SizeClasses::class_of(48);
  heap::CounterSnapshot before = heap_->counters();
  uint64_t dropped_before = sampler_counts().dropped;
  enable_sampling(1);
  std::vector<void*> v;
  for (size_t i = 0; i < kObjects; ++i) v.push_back(heap_->alloc(48));
  enable_sampling(0);
  EXPECT_GE(sampler_counts().dropped - dropped_before, 300u);
  for (void* p : v) heap_->free(p);
  heap::CounterSnapshot after = heap_->counters();
  EXPECT_EQ(after.classes[cls].allocs - before.classes[cls].allocs, kObjects);
  EXPECT_EQ(after.classes[cls].frees - before.classes[cls].frees, kObjects);
  EXPECT_EQ(after.samples - before.samples, kObjects);
  EXPECT_EQ(after.large.frees - before.large.frees, after.large.allocs - before.large.allocs);
  EXPECT_EQ(after.large.freed_bytes - before.large.freed_bytes,
            after.large.alloc_bytes - before.large.alloc_bytes);
  EXPECT_TRUE(heap_->check().ok()) << heap_->check();
}

TEST_F(TelemetryTest, BigObjectsResizedInPlaceKeepLiveBytesExact) {
  heap_ = std::move(Heap::create(HeapOptions{.params = testing::params_with_large_range()}).value());
  for (uint64_t period : {uint64_t{0}, uint64_t{1}}) {  // unsampled, then every one sampled
    SCOPED_TRACE(period);
    enable_sampling(period);
    heap::CounterSnapshot base = heap_->counters();
    auto live_big = [&] {
      heap::CounterSnapshot c = heap_->counters();
      return (c.large.alloc_bytes - base.large.alloc_bytes) - (c.large.freed_bytes - base.large.freed_bytes) +
             (c.huge.alloc_bytes - base.huge.alloc_bytes) - (c.huge.freed_bytes - base.huge.freed_bytes);
    };
    void* large = heap_->alloc(20000);
    void* huge = heap_->alloc(400000);
    ASSERT_NE(large, nullptr);
    ASSERT_NE(huge, nullptr);
    EXPECT_EQ(live_big(), heap_->size(large) + heap_->size(huge));
    // Shrinking a big object stays in place; growing may.
    auto resize = [&](void** p, size_t to) {
      bool shrinking = to < heap_->size(*p);
      void* q = heap_->resize(*p, to);
      ASSERT_NE(q, nullptr);
      if (shrinking) {
        EXPECT_EQ(q, *p);
      }
      *p = q;
      EXPECT_EQ(live_big(), heap_->size(large) + heap_->size(huge)) << "resized to " << to;
    };
    for (size_t to : {size_t{17000}, size_t{30000}, size_t{24000}}) resize(&large, to);
    for (size_t to : {size_t{200000}, size_t{900000}, size_t{100000}}) resize(&huge, to);
    heap_->free(large);
    heap_->free(huge);
    EXPECT_EQ(live_big(), 0u);
    enable_sampling(0);
    drain_all();
  }
}

TEST_F(TelemetryTest, SamplingFromManyThreadsKeepsEveryFreeMatched) {
  uint64_t dropped_before = sampler_counts().dropped;
  enable_sampling(64 << 10);
  std::atomic<bool> stop{false};
  std::vector<memd_sample_event> events;
  std::thread drainer([&] {
    while (!stop.load()) {
      auto e = drain_all();
      events.insert(events.end(), e.begin(), e.end());
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<void*> v;
      for (int i = 0; i < 20000; ++i) {
        v.push_back(heap_->alloc(16 + rng() % 3000));
        if (v.size() > 200) {
          heap_->free(v.front());
          v.erase(v.begin());
        }
      }
      for (void* p : v) heap_->free(p);
    });
  }
  for (auto& t : ts) t.join();
  stop = true;
  drainer.join();
  enable_sampling(0);
  auto rest = drain_all();
  events.insert(events.end(), rest.begin(), rest.end());
  ASSERT_EQ(sampler_counts().dropped, dropped_before) << "the check below needs every event";
  EXPECT_GT(expect_each_sample_freed_once(events), 100u);
}

}  // namespace
}  // namespace memd
