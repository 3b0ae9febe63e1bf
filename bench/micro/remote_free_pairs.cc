// Instructions of a remote free, counted (cachegrind), not timed: the main
// thread allocates 1,024 objects of 16–100 B, then either frees them itself
// (`local`) or hands them to a second thread, which has its own heap, to
// free (`remote`); repeated ROUNDS times. Under valgrind the two threads run
// one at a time, so counts do not depend on scheduling. The cost of one pair
// is the difference between two runs' totals over the difference of their
// pairs (the start-up and the thread cancel out):
//
//   LD_PRELOAD=.../libmemd-malloc.so valgrind --tool=cachegrind --cache-sim=no
//       build/release/bench/remote_free_pairs remote 500     (then 1000)
//   pair = (I refs at 1000 - I refs at 500) / (500 * 1024)
//
// Like the workloads, it links no allocator: any malloc can be preloaded.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <semaphore>
#include <thread>

namespace {

constexpr int kBatch = 1024;
void* objects[kBatch];
std::binary_semaphore go(0), done(0);

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[1], "local") != 0 && std::strcmp(argv[1], "remote") != 0)) {
    std::fprintf(stderr, "usage: %s local|remote ROUNDS\n", argv[0]);
    return 2;
  }
  const bool remote = std::strcmp(argv[1], "remote") == 0;
  const int rounds = std::atoi(argv[2]);
  std::thread freer([&] {
    void* volatile own = std::malloc(8);  // a heap of its own: its frees of main's objects are remote
    std::free(own);
    for (int r = 0; r < rounds; ++r) {
      go.acquire();
      if (remote) {
        for (void* p : objects) std::free(p);
      }
      done.release();
    }
  });
  unsigned x = 1;
  for (int r = 0; r < rounds; ++r) {
    for (void*& p : objects) {
      x = x * 1103515245u + 12345u;
      p = std::malloc(16 + (x >> 16) % 85);
      static_cast<unsigned char*>(p)[0] = 1;
    }
    if (!remote) {
      for (void* p : objects) std::free(p);
    }
    go.release();
    done.acquire();
  }
  freer.join();
  return 0;
}
