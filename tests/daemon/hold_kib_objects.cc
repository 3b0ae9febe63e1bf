// A program for profile_accuracy_test, run under the malloc shim with
// MEMD_TELEMETRY=1: holds MIB MiB in objects of 1 KiB on its main thread,
// then makes one marker allocation, prints "ready" and waits to be killed.
//
//   hold_kib_objects MIB
//
// Its main thread's heap is made before the shim turns sampling on: the
// shim does that in its constructor, and early_malloc below runs before
// every library's constructor (as libstdc++'s own constructor, which
// allocates, would anyway). So the profile sees what a heap made before
// sampling was on samples afterwards.
//
// The objects form a list through their first word: the program allocates
// nothing else. The marker comes last and is large enough to be sampled at
// any period the test uses (and by a heap whose countdown started before
// sampling was on, which ran out within 64 MiB): once the daemon has it,
// it has every sample taken before it.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace {

constexpr size_t kObjectBytes = 1024;
constexpr size_t kMarkerBytes = (size_t{64} << 20) + 4097;  // profile_accuracy_test knows it by this size

void* early;

// Runs before any shared library's constructor (DT_PREINIT_ARRAY).
void early_malloc(int, char**, char**) { early = std::malloc(100); }
__attribute__((section(".preinit_array"), used)) void (*const preinit)(int, char**, char**) = early_malloc;

// Kept out of line so that sampled stacks name it.
__attribute__((noinline)) void* hold_kib_objects(size_t count) {
  void* head = nullptr;
  for (size_t i = 0; i < count; ++i) {
    auto* p = static_cast<void**>(std::malloc(kObjectBytes));
    if (p == nullptr) return nullptr;
    *p = head;
    head = p;
  }
  return head;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  // Never outlive the test, even if it fails before killing us.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  size_t count = std::strtoull(argv[1], nullptr, 10) * ((size_t{1} << 20) / kObjectBytes);
  void* volatile objects = hold_kib_objects(count);
  void* volatile marker = std::malloc(kMarkerBytes);
  if (objects == nullptr || marker == nullptr || early == nullptr) return 1;
  std::printf("ready %zu objects\n", count);
  std::fflush(stdout);
  for (;;) pause();
}
