// wl_cache_thrash: active false sharing. Every thread, at the same time,
// allocates an 8 B object, writes it many times and frees it, over and over.
// An allocator that serves concurrent threads from one shared pool of small
// blocks hands them neighbouring blocks of one cache line, and the threads'
// writes then fight over the line (see false_sharing.h).
#include "false_sharing.h"

namespace {

constexpr uint64_t kIterations = 2000;    // objects per thread, at scale 1
constexpr uint64_t kRepetitions = 20'000;  // writes of each byte per object

}  // namespace

int main(int argc, char** argv) {
  wl::Args args = wl::parse_args(argc, argv, 2, true);
  uint64_t iterations = wl::scaled(kIterations, args.scale);
  uint64_t h = wl::run_together(args.threads, [&](int t) {
    uint64_t sum = 0;
    for (uint64_t i = 0; i < iterations; ++i) {
      void* p = wl::xmalloc(wl::kSharingObjectSize);
      sum += wl::hammer(p, kRepetitions, static_cast<uint64_t>(t) + i);
      std::free(p);
    }
    return sum;
  });
  wl::report(h, static_cast<size_t>(args.threads) * wl::kSharingObjectSize);
  return 0;
}
