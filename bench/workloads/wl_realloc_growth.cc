// wl_realloc_growth: buffers grown step by step with realloc from 16 B to a
// few hundred KiB, the way vectors, string builders and I/O buffers grow.
// Half the buffers double (amortised growth), half grow by small increments
// (appending a record at a time), and several grow at once so no buffer can
// simply keep extending into free space behind it. Each step appends data and
// checks that realloc kept the old contents. Single-threaded.
#include <vector>

#include "growing_buffers.h"

namespace {

constexpr int kBuffers = 16;              // growing concurrently
constexpr uint64_t kGenerations = 280;    // grow-all-then-free-all cycles, at scale 1

using Buffer = wl::GrowingBuffer;

// Appends bytes [from, to) with a pattern derived from their offset, so any
// realloc that loses or shifts data is caught by check().
void append(Buffer& b, size_t from, size_t to) {
  for (size_t i = from; i < to; ++i) b.data[i] = static_cast<unsigned char>(i * 131 + 7);
}

void check(const Buffer& b, size_t upto) {
  for (size_t i : {size_t{0}, upto / 2, upto - 1})
    if (b.data[i] != static_cast<unsigned char>(i * 131 + 7)) wl::die("realloc lost data");
}

}  // namespace

int main(int argc, char** argv) {
  wl::Args args = wl::parse_args(argc, argv, 1, false);
  uint64_t generations = wl::scaled(kGenerations, args.scale);

  wl::Rng rng(777);
  wl::LiveBytes live;
  uint64_t h = 0;
  for (uint64_t g = 0; g < generations; ++g) {
    std::vector<Buffer> bufs(kBuffers);
    for (int i = 0; i < kBuffers; ++i) {
      bufs[i].doubling = (i % 2 == 0);
      bufs[i].target = rng.log_uniform(64 * 1024, 384 * 1024);
    }
    // Round-robin: every unfinished buffer takes one growth step per pass.
    wl::grow_round_robin(
        bufs, live,
        [&](const Buffer& b) { return b.size == 0 ? size_t{16} : b.doubling ? b.size * 2 : b.size + rng.range(16, 512); },
        check, append);
    for (Buffer& b : bufs) {
      h = wl::mix(h, b.size);
      h = wl::mix(h, b.data[b.size / 3]);
      std::free(b.data);
      live.sub(b.size);
    }
  }
  wl::report(h, live.peak());
  return 0;
}
