// wl_producer_consumer: objects allocated on one thread, freed on another
// (xmalloc-test). Producers fill batches of small/medium objects and hand them
// through a bounded queue; consumers verify and free them. Every free is a
// remote free, the path where per-thread caches must return memory to the
// owner without locking the world or leaking it into the wrong thread.
#include <atomic>
#include <thread>
#include <vector>

#include "bounded_queue.h"
#include "common.h"

namespace {

constexpr int kBatch = 64;
constexpr size_t kQueueDepth = 16;             // batches waiting in the queue
constexpr size_t kHeldPerConsumer = 128;       // batches a consumer keeps before freeing
constexpr uint64_t kBatchesTotal = 36'000;     // split across producers, at scale 1

struct Batch {
  void* ptr[kBatch];
  uint32_t size[kBatch];
  uint64_t tag[kBatch];
  size_t bytes;  // requested bytes in this batch, including the Batch itself
};

// Live bytes shared by all threads. Producers count a batch before allocating
// it and consumers uncount it after freeing it, so the counter never
// under-states what is live; one atomic per 64 objects keeps it off the
// critical path. Live data is dominated by the batches consumers hold, so the
// peak hardly depends on thread scheduling.
class SharedLive {
 public:
  void add(size_t n) {
    size_t now = current_.fetch_add(n, std::memory_order_relaxed) + n;
    size_t seen = peak_.load(std::memory_order_relaxed);
    while (now > seen && !peak_.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
    }
  }
  void sub(size_t n) { current_.fetch_sub(n, std::memory_order_relaxed); }
  size_t peak() const { return peak_.load(); }

 private:
  std::atomic<size_t> current_{0};
  std::atomic<size_t> peak_{0};
};

SharedLive g_live;

// Sums are order-independent, so the checksum does not depend on which
// consumer got which batch.
void produce(BoundedQueue<Batch*>& q, uint64_t seed, uint64_t batches, std::atomic<uint64_t>& sum) {
  wl::Rng rng(seed);
  uint64_t local = 0;
  for (uint64_t b = 0; b < batches; ++b) {
    uint32_t sizes[kBatch];
    size_t bytes = sizeof(Batch);
    for (uint32_t& s : sizes) {
      s = static_cast<uint32_t>(rng.log_uniform(16, 4096));
      bytes += s;
    }
    g_live.add(bytes);
    auto* batch = new Batch;
    batch->bytes = bytes;
    for (int i = 0; i < kBatch; ++i) {
      batch->size[i] = sizes[i];
      batch->tag[i] = rng.next();
      batch->ptr[i] = wl::xmalloc(sizes[i]);
      wl::fill(batch->ptr[i], sizes[i], batch->tag[i]);
      local += batch->tag[i];
    }
    q.push(batch);
  }
  sum.fetch_add(local);
}

uint64_t release(Batch* batch) {
  uint64_t sum = 0;
  for (int i = 0; i < kBatch; ++i) {
    uint64_t got = wl::read_tag(batch->ptr[i], batch->size[i]);
    if (got != wl::expected_tag(batch->tag[i], batch->size[i])) wl::die("object corrupted in flight");
    sum += batch->tag[i];
    std::free(batch->ptr[i]);
  }
  size_t bytes = batch->bytes;
  delete batch;
  g_live.sub(bytes);
  return sum;
}

void consume(BoundedQueue<Batch*>& q, std::atomic<uint64_t>& sum) {
  uint64_t local = 0;
  // Fixed ring, allocated before any batch arrives: the consumer's own
  // bookkeeping must not add allocations of its own to the measurement.
  std::vector<Batch*> held(kHeldPerConsumer, nullptr);
  size_t next = 0;
  while (Batch* batch = q.pop()) {
    if (held[next] != nullptr) local += release(held[next]);
    held[next] = batch;
    next = (next + 1) % kHeldPerConsumer;
  }
  for (Batch* b : held)
    if (b != nullptr) local += release(b);
  sum.fetch_add(local);
}

}  // namespace

int main(int argc, char** argv) {
  wl::Args args = wl::parse_args(argc, argv, 2, true);
  if (args.threads < 2) wl::die("needs at least 2 threads (one producer, one consumer)");
  int producers = args.threads / 2;
  int consumers = args.threads - producers;
  uint64_t batches = wl::scaled(kBatchesTotal, args.scale) / static_cast<uint64_t>(producers);

  BoundedQueue<Batch*> queue(kQueueDepth);
  std::atomic<uint64_t> produced{0}, consumed{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < consumers; ++c) threads.emplace_back(consume, std::ref(queue), std::ref(consumed));
  std::vector<std::thread> makers;
  for (int p = 0; p < producers; ++p)
    makers.emplace_back(produce, std::ref(queue), 77ull + static_cast<uint64_t>(p), batches, std::ref(produced));
  for (auto& th : makers) th.join();
  for (int c = 0; c < consumers; ++c) queue.push(nullptr);  // one stop marker per consumer
  for (auto& th : threads) th.join();

  if (produced.load() != consumed.load()) wl::die("consumers saw different data than producers wrote");
  wl::report(consumed.load() ^ (batches * static_cast<uint64_t>(producers)), g_live.peak());
  return 0;
}
