// wl_mass_free: does resident memory come back after a mass free?
//
// Builds ~300 MB of small/medium objects in 20 phases, frees every phase but
// one (95% of the data), then idles ~200 ms while doing a little allocation
// — the "request finished / cache dropped" moment of a server. It then
// prints the resident set and the live bytes it still holds, and the harness
// checks that RSS (minus the process's start-up baseline) is within 10% of
// live data.
//
// The survivors are one whole phase, kept together in allocation order: a
// page that still holds a live object can never be returned by a non-moving
// allocator, so scattering survivors at random would measure object
// placement luck, not whether the allocator gives freed pages back.
// Single-threaded.
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "common.h"

namespace {

constexpr size_t kTargetBytes = 300ull << 20;  // at scale 1
constexpr int kPhases = 20;
constexpr int kKeptPhase = 7;  // in the middle: freed memory lies on both sides
constexpr int kIdleSteps = 20;  // x 10 ms

struct Obj {
  void* ptr;
  uint32_t size;
  uint64_t tag;
};

size_t resident_bytes() {
  long pages_total = 0, pages_resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr || std::fscanf(f, "%ld %ld", &pages_total, &pages_resident) != 2) wl::die("cannot read statm");
  std::fclose(f);
  return static_cast<size_t>(pages_resident) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// push_back that keeps the index vector's own storage in the live count; the
// new block is counted before the old one is dropped, as they briefly coexist.
void push_counted(std::vector<Obj>& v, Obj o, wl::LiveBytes& live) {
  size_t before = v.capacity();
  v.push_back(o);
  if (v.capacity() != before) {
    live.add(v.capacity() * sizeof(Obj));
    live.sub(before * sizeof(Obj));
  }
}

}  // namespace

int main(int argc, char** argv) {
  wl::Args args = wl::parse_args(argc, argv, 1, false);
  size_t per_phase = wl::scaled(kTargetBytes, args.scale) / kPhases;
  size_t baseline = resident_bytes();  // binaries, libraries, allocator start-up

  wl::Rng rng(31337);
  wl::LiveBytes live;
  uint64_t h = 0;

  std::vector<std::vector<Obj>> phases(kPhases);
  for (auto& phase : phases) {
    size_t bytes = 0;
    while (bytes < per_phase) {
      size_t size = rng.log_uniform(16, 4096);
      uint64_t tag = rng.next();
      void* p = wl::xmalloc(size);
      std::memset(p, static_cast<int>(tag), size);  // every byte: RSS must be real
      std::memcpy(p, &tag, std::min(size, sizeof tag));
      push_counted(phase, {p, static_cast<uint32_t>(size), tag}, live);
      live.add(size);
      bytes += size;
    }
  }

  for (int i = 0; i < kPhases; ++i) {
    if (i == kKeptPhase) continue;
    for (Obj& o : phases[i]) {
      h = wl::mix(h, wl::read_tag(o.ptr, o.size));
      std::free(o.ptr);
      live.sub(o.size);
    }
    live.sub(phases[i].capacity() * sizeof(Obj));
    std::vector<Obj>().swap(phases[i]);
  }

  // Idle, but not silent: some allocators only return memory from inside
  // malloc/free calls, and a real program keeps doing a little work.
  for (int step = 0; step < kIdleSteps; ++step) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    for (int i = 0; i < 1000; ++i) {
      size_t size = rng.log_uniform(16, 256);
      void* p = wl::xmalloc(size);
      wl::fill(p, size, static_cast<uint64_t>(i));
      h = wl::mix(h, wl::read_tag(p, size));
      std::free(p);
    }
  }

  size_t rss = resident_bytes();
  size_t live_now = live.current();
  for (Obj& o : phases[kKeptPhase]) {
    if (wl::read_tag(o.ptr, o.size) != wl::expected_tag(o.tag, o.size)) wl::die("survivor corrupted");
    h = wl::mix(h, o.tag);
    std::free(o.ptr);
  }

  wl::report(h, live.peak());
  std::printf("rss_baseline_bytes=%zu\n", baseline);
  std::printf("rss_after_free_bytes=%zu\n", rss);
  std::printf("live_after_free_bytes=%zu\n", live_now);
  return 0;
}
