// wl_one_size: a pool of live objects of one size, a random one replaced at
// every step -- the steady state of a cache, a connection table or a node
// pool of fixed-size records. Five sizes in turn (16, 48, 64, 128 and 256 B),
// each with its own pool filled first, churned, then freed whole.
//
// What it stresses: with every object the same size, the heap's blocks of
// that class hold the whole live set and the frees land on them at random.
// An allocator whose full blocks come back at their first free (and are used
// up again by the next allocation) takes a slow path on nearly every call.
//
// Only the first 8 bytes and the last byte of an object are written, as in
// wl_random_sizes. Run with 1 thread (wl_one_size) and with --threads
// (wl_one_size_mt), each thread with its own pools.
#include <vector>

#include "common.h"
#include "pool_workers.h"

namespace {

constexpr size_t kPool = 20000;        // live objects per thread and size
constexpr uint64_t kOps = 3'000'000;   // replacements per thread and size, at scale 1
constexpr uint32_t kSizes[] = {16, 48, 64, 128, 256};

struct Obj {
  unsigned char* ptr = nullptr;
  uint64_t tag = 0;
};

struct alignas(64) Worker {  // a line each: threads write theirs at every step
  uint64_t hash = 0;
  wl::LiveBytes live;
};

void put(Obj& o, uint32_t size, wl::Rng& rng, wl::LiveBytes& live) {
  o.tag = rng.next();
  o.ptr = static_cast<unsigned char*>(wl::xmalloc(size));
  std::memcpy(o.ptr, &o.tag, sizeof o.tag);
  o.ptr[size - 1] = static_cast<unsigned char>(o.tag >> 8);
  live.add(size);
}

uint64_t take(Obj& o, uint32_t size, wl::LiveBytes& live) {
  if (wl::read_tag(o.ptr, size) != wl::expected_tag(o.tag, size)) wl::die("object head corrupted");
  if (o.ptr[size - 1] != static_cast<unsigned char>(o.tag >> 8)) wl::die("object tail corrupted");
  std::free(o.ptr);
  live.sub(size);
  return o.tag;
}

void work(Worker& w, uint64_t seed, uint64_t ops) {
  wl::Rng rng(seed);
  std::vector<Obj> pool(kPool);
  w.live.add(kPool * sizeof(Obj));
  for (uint32_t size : kSizes) {
    for (Obj& o : pool) put(o, size, rng, w.live);
    for (uint64_t i = 0; i < ops; ++i) {
      Obj& o = pool[rng.below(kPool)];
      w.hash = wl::mix(w.hash, take(o, size, w.live));
      put(o, size, rng, w.live);
    }
    for (Obj& o : pool) w.hash = wl::mix(w.hash, take(o, size, w.live));
  }
}

}  // namespace

int main(int argc, char** argv) {
  wl::Args args = wl::parse_args(argc, argv, 1, true);
  wl::run_pool_workers<Worker>(args, 21, wl::scaled(kOps, args.scale), work);
  return 0;
}
