// wl_cache_scratch: passive false sharing. The main thread allocates one 8 B
// object per thread, back to back (so they likely share a cache line), and
// hands one to each thread. Each thread frees the object it was given, then
// allocates, writes many times and frees an 8 B object, over and over. An
// allocator that gives a freed block to the thread that freed it hands each
// thread the block next to the other threads' ones, and their writes fight
// over one cache line (see false_sharing.h); one that sends a remote free
// back to its owner does not.
#include "false_sharing.h"

namespace {

constexpr uint64_t kIterations = 2000;    // objects per thread, at scale 1
constexpr uint64_t kRepetitions = 20'000;  // writes of each byte per object

}  // namespace

int main(int argc, char** argv) {
  wl::Args args = wl::parse_args(argc, argv, 2, true);
  uint64_t iterations = wl::scaled(kIterations, args.scale);
  std::vector<void*> given(args.threads);
  for (void*& p : given) p = wl::xmalloc(wl::kSharingObjectSize);

  uint64_t h = wl::run_together(args.threads, [&](int t) {
    uint64_t sum = wl::hammer(given[t], kRepetitions, static_cast<uint64_t>(t));
    std::free(given[t]);
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
