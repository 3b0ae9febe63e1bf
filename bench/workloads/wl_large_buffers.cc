// wl_large_buffers: repeatedly allocate, touch every page of, and free large
// buffers (64 KiB–4 MiB), a few alive at a time — I/O buffers, image tiles,
// per-request scratch space. An allocator that hands such memory back to the
// kernel on every free (munmap/MADV_DONTNEED) and gets it faulted in again on
// the next allocation pays a page fault per page: a page-fault storm. The
// harness reports minor faults next to the time for exactly that reason.
// Single-threaded.
#include <vector>

#include "common.h"

namespace {

constexpr size_t kAlive = 4;           // buffers alive at once
constexpr uint64_t kIterations = 15'000;  // at scale 1
constexpr size_t kPage = 4096;

struct Buf {
  unsigned char* data = nullptr;
  size_t size = 0;
  uint64_t tag = 0;
};

void touch_every_page(unsigned char* p, size_t n, uint64_t tag) {
  for (size_t off = 0; off < n; off += kPage) p[off] = static_cast<unsigned char>(tag + off / kPage);
  p[n - 1] = static_cast<unsigned char>(tag);
}

// Reads back two bytes touch_every_page() wrote (buffers are >= 64 KiB, so the
// second page's byte is never the overwritten last byte).
uint64_t sample(const Buf& b) {
  if (b.data[kPage] != static_cast<unsigned char>(b.tag + 1)) wl::die("buffer corrupted");
  return b.data[kPage] + (uint64_t{b.data[b.size - 1]} << 8);
}

}  // namespace

int main(int argc, char** argv) {
  wl::Args args = wl::parse_args(argc, argv, 1, false);
  uint64_t iterations = wl::scaled(kIterations, args.scale);

  wl::Rng rng(99);
  wl::LiveBytes live;
  uint64_t h = 0;
  std::vector<Buf> bufs(kAlive);
  live.add(kAlive * sizeof(Buf));
  for (uint64_t i = 0; i < iterations; ++i) {
    Buf& b = bufs[rng.below(kAlive)];
    if (b.data != nullptr) {
      h = wl::mix(h, sample(b));
      std::free(b.data);
      live.sub(b.size);
    }
    b.size = rng.log_uniform(64 * 1024, 4 * 1024 * 1024);
    b.tag = rng.next();
    b.data = static_cast<unsigned char*>(wl::xmalloc(b.size));
    live.add(b.size);
    touch_every_page(b.data, b.size, b.tag);
  }
  for (Buf& b : bufs) {
    if (b.data == nullptr) continue;
    h = wl::mix(h, sample(b));
    std::free(b.data);
  }
  wl::report(h, live.peak());
  return 0;
}
