#include "disciplines/fault_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace memd::disciplines {
namespace {

// Enough for every region a daemon may serve (max-regions) and then some.
constexpr int kSlots = 4096;
constexpr size_t kPage = 4096;  // the system's page size here (sysconf is not async-signal-safe)

struct Range {
  std::atomic<uintptr_t> base{0};  // 0: free slot
  std::atomic<size_t> len{0};
  std::atomic<uint64_t> faults{0};
  std::atomic<size_t> first{0};
};
Range ranges[kSlots];
std::atomic<bool> installed{false};
struct sigaction previous;

void forward(int sig, siginfo_t* info, void* context) {
  if (previous.sa_flags & SA_SIGINFO) {
    if (previous.sa_sigaction != nullptr) {
      previous.sa_sigaction(sig, info, context);
      return;
    }
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
    return;
  }
  // The default action: die of the signal, as without the guard. Returning
  // with the default restored refaults at once.
  signal(sig, SIG_DFL);
}

void on_sigbus(int sig, siginfo_t* info, void* context) {
  int saved = errno;
  uintptr_t at = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Range& r : ranges) {
    uintptr_t base = r.base.load(std::memory_order_acquire);
    if (base == 0 || at - base >= r.len.load(std::memory_order_acquire)) continue;
    uintptr_t first = at & ~uintptr_t{kPage - 1};
    void* m = mmap(reinterpret_cast<void*>(first), kPage, PROT_READ | PROT_WRITE,
                   MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) break;
    if (r.faults.fetch_add(1, std::memory_order_acq_rel) == 0) r.first.store(at - base, std::memory_order_release);
    errno = saved;
    return;
  }
  errno = saved;
  forward(sig, info, context);
}

}  // namespace

absl::Status install_fault_guard() {
  bool expected = false;
  if (!installed.compare_exchange_strong(expected, true)) return absl::OkStatus();
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGBUS, &sa, &previous) != 0) {
    installed.store(false);
    return absl::InternalError(absl::StrCat("sigaction(SIGBUS): ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

bool fault_guard_installed() { return installed.load(std::memory_order_acquire); }

int guard_range(const void* base, size_t len) {
  if (base == nullptr || len == 0) return -1;
  for (int i = 0; i < kSlots; ++i) {
    Range& r = ranges[i];
    uintptr_t expected = 0;
    // Claim the slot with a placeholder base the handler never matches
    // (its length is still 0), then publish the real range.
    if (!r.base.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) continue;
    r.faults.store(0, std::memory_order_relaxed);
    r.first.store(0, std::memory_order_relaxed);
    r.len.store(len, std::memory_order_release);
    r.base.store(reinterpret_cast<uintptr_t>(base), std::memory_order_release);
    return i;
  }
  return -1;
}

void unguard_range(int id) {
  if (id < 0 || id >= kSlots) return;
  ranges[id].len.store(0, std::memory_order_release);
  ranges[id].base.store(0, std::memory_order_release);
}

uint64_t range_faults(int id, size_t* first_offset) {
  if (id < 0 || id >= kSlots) return 0;
  uint64_t n = ranges[id].faults.load(std::memory_order_acquire);
  if (first_offset != nullptr && n != 0) *first_offset = ranges[id].first.load(std::memory_order_acquire);
  return n;
}

}  // namespace memd::disciplines
