#include "heap/sampling.h"

#include <cmath>

namespace memd::heap {

std::atomic<const SamplingHooks*> internal::sampling_hooks{nullptr};
std::atomic<uint64_t> internal::sampling_period{0};

void set_sampling(const SamplingHooks* hooks, uint64_t period_bytes) {
  internal::sampling_hooks.store(hooks, std::memory_order_release);
  internal::sampling_period.store(period_bytes, std::memory_order_release);
}

int64_t next_sample_countdown(uint64_t period, uint64_t* rng) {
  if (period == 0) return kSamplingRecheckBytes;
  // xorshift64*: cheap and good enough to place samples.
  uint64_t x = *rng != 0 ? *rng : 0x9e3779b97f4a7c15ull;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *rng = x;
  // A uniform in (0, 1] from the top 53 bits, then -ln(u) * period.
  double u = (static_cast<double>((x * 0x2545f4914f6cdd1dull) >> 11) + 1.0) * 0x1.0p-53;
  double next = -std::log(u) * static_cast<double>(period);
  if (next < 1.0) return 1;
  if (next > 0x1.0p62) return int64_t{1} << 62;
  return static_cast<int64_t>(next);
}

}  // namespace memd::heap
