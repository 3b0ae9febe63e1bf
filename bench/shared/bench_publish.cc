// bench_publish: durable allocate + fill + publish of 64-512 B objects, the
// persistent-heap operation PMDK users call pmemobj_alloc or a transaction
// for, at equal durability on each side.
//
// A ring of `--slots` links lives in the heap (a root). Each operation picks
// the next slot, retires the object it names, and publishes a new object of
// a random size in 64..512 B whose bytes were filled first. When an
// operation returns, after a power cut the slot names either the new object
// with its bytes, or (the operation interrupted) the object it named before
// or none; never half an object:
//   memd-publish     Region::reserve, fill, Region::publish into the slot
//                    (the retired object: the slot cleared durably, then a
//                    plain free, whose metadata is not flushed: a cut can
//                    leak it, never corrupt anything)
//   pmemobj-atomic   pmemobj_free of the slot, then pmemobj_alloc into it
//                    with a constructor that fills and persists the bytes
//   pmemobj-tx       one transaction: the slot snapshotted, the old object
//                    tx_free'd, the new one tx_alloc'ed and filled
// "Durable" is libpmem's: cache flushes when the mapping is (or is forced
// to be, PMEM_IS_PMEM_FORCE=1) persistent memory, msync otherwise; memd's
// region is a pmem-discipline file through the same libpmem, so both sides
// make the same call for the same bytes. The runner (run_publish.py) sets
// the variable per case.
//
// Runs for `--seconds`, prints one line: heap, operations, seconds.
#include <libpmemobj.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "region/region.h"

namespace {

constexpr uint64_t kTypeNum = 1;
constexpr size_t kHeapBytes = size_t{256} << 20;

struct Config {
  std::string heap;
  std::string dir = "/tmp";
  double seconds = 1.0;
  uint32_t slots = 4096;
};

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "bench_publish: %s\n", what.c_str());
  std::exit(1);
}

size_t next_size(std::mt19937& rng) { return 64 + rng() % 449; }

void fill(void* p, size_t size, uint32_t seed) { std::memset(p, static_cast<int>(seed & 0xff), size); }

using Clock = std::chrono::steady_clock;

template <class Op>
uint64_t run_for(double seconds, Op op) {
  auto end = Clock::now() + std::chrono::duration<double>(seconds);
  uint64_t ops = 0;
  while (true) {
    for (int i = 0; i < 16; ++i) op(ops++);
    if (Clock::now() >= end) return ops;
  }
}

uint64_t run_memd(const Config& c, std::string path, double* elapsed) {
  memd::RegionOptions o;
  o.discipline = memd::Discipline::kPmem;
  o.max_bytes = kHeapBytes;
  auto r = memd::Region::create(path, o);
  if (!r.ok()) fail("Region::create: " + r.status().ToString());
  memd::Region& region = **r;
  auto* ring = static_cast<std::atomic<uint64_t>*>(region.alloc(c.slots * sizeof(std::atomic<uint64_t>)));
  if (ring == nullptr) fail("ring");
  for (uint32_t i = 0; i < c.slots; ++i) ring[i].store(0);
  if (!region.checkpoint().ok()) fail("checkpoint");
  std::mt19937 rng(1);
  auto start = Clock::now();
  uint64_t ops = run_for(c.seconds, [&](uint64_t n) {
    std::atomic<uint64_t>& link = ring[n % c.slots];
    if (uint64_t old = link.load(std::memory_order_relaxed)) {
      link.store(0, std::memory_order_release);
      (void)region.persist(&link, sizeof link);
      region.free(region.at(old - 1));
    }
    size_t size = next_size(rng);
    void* p = region.reserve(size);
    if (p == nullptr) fail("reserve");
    fill(p, size, static_cast<uint32_t>(n));
    absl::Status s = region.publish(p, &link, region.offset_of(p) + 1);
    if (!s.ok()) fail("publish: " + s.ToString());
  });
  *elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  r->reset();
  (void)memd::Region::remove(path, memd::Discipline::kPmem);
  return ops;
}

struct Root {
  uint64_t slots;
  PMEMoid* ring() { return reinterpret_cast<PMEMoid*>(this + 1); }
};

struct Fill {
  size_t size;
  uint32_t seed;
};

int construct(PMEMobjpool* pop, void* ptr, void* arg) {
  auto* f = static_cast<Fill*>(arg);
  fill(ptr, f->size, f->seed);
  pmemobj_persist(pop, ptr, f->size);
  return 0;
}

uint64_t run_pmemobj(const Config& c, const std::string& path, bool tx, double* elapsed) {
  PMEMobjpool* pop = pmemobj_create(path.c_str(), "memd-bench-publish", kHeapBytes, 0600);
  if (pop == nullptr) fail("pmemobj_create: " + std::string(pmemobj_errormsg()));
  PMEMoid root_oid = pmemobj_root(pop, sizeof(Root) + c.slots * sizeof(PMEMoid));
  if (OID_IS_NULL(root_oid)) fail("pmemobj_root");
  auto* root = static_cast<Root*>(pmemobj_direct(root_oid));
  std::mt19937 rng(1);
  auto start = Clock::now();
  uint64_t ops = run_for(c.seconds, [&](uint64_t n) {
    PMEMoid* slot = &root->ring()[n % c.slots];
    Fill f{next_size(rng), static_cast<uint32_t>(n)};
    if (!tx) {
      if (!OID_IS_NULL(*slot)) pmemobj_free(slot);
      if (pmemobj_alloc(pop, slot, f.size, kTypeNum, construct, &f) != 0) fail("pmemobj_alloc");
      return;
    }
    int err = 0;
    TX_BEGIN(pop) {
      pmemobj_tx_add_range_direct(slot, sizeof *slot);
      if (!OID_IS_NULL(*slot)) pmemobj_tx_free(*slot);
      *slot = pmemobj_tx_alloc(f.size, kTypeNum);
      fill(pmemobj_direct(*slot), f.size, f.seed);
    }
    TX_ONABORT { err = 1; }
    TX_END
    if (err != 0) fail("transaction aborted");
  });
  *elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  pmemobj_close(pop);
  unlink(path.c_str());
  return ops;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--heap") c.heap = v;
    else if (a == "--dir") c.dir = v;
    else if (a == "--seconds") c.seconds = std::atof(v.c_str());
    else if (a == "--slots") c.slots = static_cast<uint32_t>(std::atoi(v.c_str()));
    else fail("unknown option " + a);
  }
  std::string path = c.dir + "/bench-publish-" + std::to_string(getpid());
  double elapsed = 0;
  uint64_t ops;
  if (c.heap == "memd-publish") ops = run_memd(c, path, &elapsed);
  else if (c.heap == "pmemobj-atomic") ops = run_pmemobj(c, path, false, &elapsed);
  else if (c.heap == "pmemobj-tx") ops = run_pmemobj(c, path, true, &elapsed);
  else fail("--heap memd-publish|pmemobj-atomic|pmemobj-tx");
  std::printf("%s %llu %.6f\n", c.heap.c_str(), static_cast<unsigned long long>(ops), elapsed);
  return 0;
}
