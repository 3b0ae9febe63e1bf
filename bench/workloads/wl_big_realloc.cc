// wl_big_realloc: buffers grown by realloc to several MiB, the way a file
// read into a growing buffer, a big vector or a log of records grows. Four
// buffers grow at once by half their size each step (so none can simply
// extend into the free pages behind it), from 64 KiB to 4-48 MiB; each step
// writes the new part and checks that realloc kept the old contents. An
// allocator that copies moves every byte about twice over; one that remaps
// pages (mremap) moves page-table entries. Single-threaded.
#include <vector>

#include "growing_buffers.h"

namespace {

constexpr int kBuffers = 4;              // growing concurrently
constexpr uint64_t kGenerations = 24;    // grow-all-then-free-all cycles, at scale 1

using Buffer = wl::GrowingBuffer;

unsigned char pattern(size_t i) { return static_cast<unsigned char>(i * 131 + (i >> 12) + 7); }

// Writes the new bytes [from, to) a word at a time, with a page-dependent
// pattern byte at each page start: moved or copied pages must keep their order.
void append(Buffer& b, size_t from, size_t to) {
  std::memset(b.data + from, 0x3c, to - from);
  for (size_t i = (from + 4095) & ~size_t{4095}; i < to; i += 4096) b.data[i] = pattern(i);
  b.data[from] = pattern(from);
}

void check(const Buffer& b, size_t upto) {
  for (size_t i = 0; i < upto; i += 4096) {
    if (b.data[i] != pattern(i)) wl::die("realloc lost data");
  }
}

}  // namespace

int main(int argc, char** argv) {
  wl::Args args = wl::parse_args(argc, argv, 1, false);
  uint64_t generations = wl::scaled(kGenerations, args.scale);

  wl::Rng rng(4242);
  wl::LiveBytes live;
  uint64_t h = 0;
  for (uint64_t g = 0; g < generations; ++g) {
    std::vector<Buffer> bufs(kBuffers);
    for (Buffer& b : bufs) b.target = rng.log_uniform(4 << 20, 48 << 20);
    wl::grow_round_robin(
        bufs, live, [](const Buffer& b) { return b.size == 0 ? size_t{64} << 10 : b.size + b.size / 2; }, check,
        append);
    for (Buffer& b : bufs) {
      check(b, b.size);
      h = wl::mix(h, b.size);
      std::free(b.data);
      live.sub(b.size);
    }
  }
  wl::report(h, live.peak());
  return 0;
}
