// wl_random_sizes: sizes drawn log-uniform from 8 B to 64 KiB, random
// lifetimes. Each thread keeps a pool of live objects and replaces a random
// one at every step, so an object's lifetime is geometric and every octave of
// size is equally common: as many 8–16 B objects as 32–64 KiB ones. That
// crosses every small size class and the small/large boundaries of most
// allocators on every few steps.
//
// Only the first 8 bytes and the last byte of an object are written, as a
// program that fills in a header and leaves the rest for later would: peak
// RSS then shows what the allocator itself touches and keeps, not the data.
// Run with 1 thread (wl_random_sizes) and with --threads
// (wl_random_sizes_mt), each thread with its own pool.
#include <vector>

#include "common.h"
#include "pool_workers.h"

namespace {

constexpr size_t kPool = 3000;         // live objects per thread (~22 MB)
constexpr uint64_t kOps = 2'000'000;   // replacements per thread, at scale 1
constexpr size_t kMinSize = 8;
constexpr size_t kMaxSize = 64 * 1024;

struct Obj {
  unsigned char* ptr = nullptr;
  uint32_t size = 0;
  uint64_t tag = 0;
};

struct Worker {
  std::vector<Obj> pool = std::vector<Obj>(kPool);
  uint64_t hash = 0;
  wl::LiveBytes live;
};

void put(Obj& o, wl::Rng& rng, wl::LiveBytes& live) {
  o.size = static_cast<uint32_t>(rng.log_uniform(kMinSize, kMaxSize));
  o.tag = rng.next();
  o.ptr = static_cast<unsigned char*>(wl::xmalloc(o.size));
  std::memcpy(o.ptr, &o.tag, std::min<size_t>(o.size, sizeof o.tag));
  if (o.size > sizeof o.tag) o.ptr[o.size - 1] = static_cast<unsigned char>(o.tag >> 8);
  live.add(o.size);
}

uint64_t take(Obj& o, wl::LiveBytes& live) {
  if (wl::read_tag(o.ptr, o.size) != wl::expected_tag(o.tag, o.size)) wl::die("object head corrupted");
  if (o.size > sizeof o.tag && o.ptr[o.size - 1] != static_cast<unsigned char>(o.tag >> 8)) {
    wl::die("object tail corrupted");
  }
  std::free(o.ptr);
  live.sub(o.size);
  return o.tag;
}

void work(Worker& w, uint64_t seed, uint64_t ops) {
  wl::Rng rng(seed);
  w.live.add(kPool * sizeof(Obj));
  for (Obj& o : w.pool) put(o, rng, w.live);
  for (uint64_t i = 0; i < ops; ++i) {
    Obj& o = w.pool[rng.below(kPool)];
    w.hash = wl::mix(w.hash, take(o, w.live));
    put(o, rng, w.live);
  }
  for (Obj& o : w.pool) w.hash = wl::mix(w.hash, take(o, w.live));
}

}  // namespace

int main(int argc, char** argv) {
  wl::Args args = wl::parse_args(argc, argv, 1, true);
  wl::run_pool_workers<Worker>(args, 8, wl::scaled(kOps, args.scale), work);
  return 0;
}
