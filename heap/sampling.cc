#include "heap/sampling.h"

#include <array>

namespace memd::heap {

std::atomic<const SamplingHooks*> internal::sampling_hooks{nullptr};
std::atomic<uint64_t> internal::sampling_period{0};

void set_sampling(const SamplingHooks* hooks, uint64_t period_bytes) {
  internal::sampling_hooks.store(hooks, std::memory_order_release);
  internal::sampling_period.store(period_bytes, std::memory_order_release);
}

namespace {

// log2(1 + i/256), i = 0..256, in Q32 fixed point, made by the compiler:
// ln(m) = 2 atanh(s) with s = (m - 1) / (m + 1) <= 1/3, a series that has
// converged far below a Q32 unit after 20 terms.
constexpr double kLn2 = 0.6931471805599453;
constexpr double log2_by_series(double m) {
  double s = (m - 1) / (m + 1), s2 = s * s, term = s, sum = 0;
  for (int k = 1; k < 40; k += 2, term *= s2) sum += term / k;
  return 2 * sum / kLn2;
}
constexpr auto kLog2Q32 = [] {
  std::array<uint64_t, 257> t{};
  for (int i = 0; i <= 256; ++i) t[i] = static_cast<uint64_t>(log2_by_series(1.0 + i / 256.0) * 0x1.0p32 + 0.5);
  return t;
}();
constexpr uint64_t kLn2Q32 = static_cast<uint64_t>(kLn2 * 0x1.0p32 + 0.5);

// Inline in the draw below: the probe of a heap with sampling off draws
// once per kSamplingProbeBytes, and every call counts there.
inline uint64_t minus_ln_q32_inline(uint64_t v) {
  // v = 2^k * m with m in [1, 2); log2(m) from the table, interpolated
  // linearly (off by under 3e-6).
  int k = 63 - __builtin_clzll(v);
  uint64_t frac = (v << (63 - k)) << 1;         // m - 1 in Q64
  uint64_t i = frac >> 56;                       // m's bucket of 1/256
  uint64_t within = (frac >> 24) & 0xffffffffu;  // where in it, Q32
  uint64_t log2_m = kLog2Q32[i] + (((kLog2Q32[i + 1] - kLog2Q32[i]) * within) >> 32);
  uint64_t minus_log2_u = (uint64_t{53} << 32) - ((uint64_t(k) << 32) + log2_m);
  return static_cast<uint64_t>((static_cast<unsigned __int128>(minus_log2_u) * kLn2Q32) >> 32);
}

uint64_t xorshift(uint64_t* rng) {
  // xorshift64*: cheap and good enough to place samples.
  uint64_t x = *rng != 0 ? *rng : 0x9e3779b97f4a7c15ull;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *rng = x;
  return x * 0x2545f4914f6cdd1dull;
}

// Uniform in [0, 1).
double uniform(uint64_t* rng) { return static_cast<double>(xorshift(rng) >> 11) * 0x1.0p-53; }

}  // namespace

// 1 - e^-x without libm (the malloc shim links no libm: a C program under
// it would load libm for this one call). Below 1/2 the series of 1 - e^-x,
// exact where 1 - exp(-x) would cancel; above, e^-x = 2^-n e^-r with
// r = x - n ln 2 in [0, ln 2), e^-r by its series. 25 terms leave every
// remainder below 2^-60 relative.
double internal::one_minus_exp_neg(double x) {
  if (!(x > 0)) return 0;  // also NaN
  auto series = [](double y) {  // 1 - e^-y: the sum over k >= 1 of -(-y)^k / k!
    double term = y, sum = y;
    for (int k = 2; k <= 25; ++k) {
      term *= -y / k;
      sum += term;
    }
    return sum;
  };
  if (x < 0.5) return series(x);
  if (x > 700) return 1;  // e^-x below 2^-1000
  constexpr double kLn2 = 0.6931471805599453094;
  int n = static_cast<int>(x / kLn2);
  double r = x - n * kLn2;
  double e_minus_r = 1 - series(r);
  double scale = 1;
  for (double half = 0.5; n > 0; n >>= 1, half *= half) {
    if (n & 1) scale *= half;
  }
  return 1 - e_minus_r * scale;
}

namespace {

// The chance that a countdown with this mean runs out within `size` bytes.
double runs_out_within(uint64_t size, uint64_t mean) {
  return internal::one_minus_exp_neg(static_cast<double>(size) / static_cast<double>(mean));
}

inline int64_t draw_countdown(uint64_t mean, uint64_t* rng) {
  // -ln(u) * mean for a uniform u in (0, 1] made of the top 53 bits, in
  // integers: libm's log and the conversions around it took a third of a
  // sampled allocation's time.
  uint64_t v = (xorshift(rng) >> 11) + 1;
  uint64_t minus_ln = minus_ln_q32_inline(v);  // below 37 (53 ln 2), so under 2^38 in Q32
  if (mean < (uint64_t{1} << 25)) {
    // The product fits 64 bits: the probe's mean, and periods up to 32 MiB.
    uint64_t small = (minus_ln * mean) >> 32;
    return small < 1 ? 1 : static_cast<int64_t>(small);
  }
  auto next = (static_cast<unsigned __int128>(minus_ln) * mean) >> 32;
  if (next < 1) return 1;
  if (next > (uint64_t{1} << 62)) return int64_t{1} << 62;
  return static_cast<int64_t>(next);
}

uint64_t countdown_mean(uint64_t period) { return period != 0 ? period : kSamplingProbeBytes; }

// A shorter countdown ran out: the probe of a heap made while sampling was
// off (or a countdown of a shorter period). Its ends are the points of a
// Poisson process over the bytes with rate 1/ran, which from any byte on is
// independent of what came before; keeping this allocation with
// probability runs_out_within(size, period) / runs_out_within(size, ran)
// samples it, and every allocation since sampling changed, with probability
// runs_out_within(size, period), as a countdown of `period` would have
// (about ran/period for objects much smaller than ran).
__attribute__((noinline)) CountdownEnd end_of_shorter(uint64_t ran, uint64_t period, uint64_t size, SampleDraws* d,
                                                     int64_t next) {
  double keep = size == 0 ? static_cast<double>(ran) / static_cast<double>(period)
                          : runs_out_within(size, period) / runs_out_within(size, ran);
  return {uniform(&d->rng) < keep, next};
}

}  // namespace

uint64_t internal::minus_ln_q32(uint64_t v) { return minus_ln_q32_inline(v); }

int64_t next_sample_countdown(uint64_t mean, uint64_t* rng) { return draw_countdown(mean, rng); }

int64_t start_sample_countdown(uint64_t period, SampleDraws* d) {
  d->mean = countdown_mean(period);
  return draw_countdown(d->mean, &d->rng);
}

CountdownEnd end_sample_countdown(uint64_t period, uint64_t size, SampleDraws* d) {
  uint64_t ran = d->mean;
  d->mean = countdown_mean(period);
  int64_t next = draw_countdown(d->mean, &d->rng);
  if (period == 0) return {false, next};
  // The usual case (ran == period). With a longer countdown (a shorter
  // period set since it was drawn), the bytes it ran over unsampled stay so:
  // this allocation is a sample, and the rate is right from the next.
  if (ran >= period) return {true, next};
  return end_of_shorter(ran, period, size, d, next);
}

}  // namespace memd::heap
