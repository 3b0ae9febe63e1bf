// The exponential draw behind allocation sampling (heap/sampling.h): -ln in
// fixed point against libm, the countdowns' distribution, and what a heap
// samples when sampling is turned on after it was made.
#include "heap/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace memd::heap {
namespace {

double minus_ln(uint64_t v) { return static_cast<double>(internal::minus_ln_q32(v)) * 0x1.0p-32; }

TEST(Sampling, MinusLnMatchesLibmOverTheWholeRange) {
  // Both ends, powers of two and their neighbours (the table's edges), and
  // a sweep over every binade.
  for (uint64_t v : {uint64_t{1}, uint64_t{2}, uint64_t{3}, (uint64_t{1} << 53) - 1, uint64_t{1} << 53,
                     uint64_t{1} << 52, (uint64_t{1} << 52) + 1, (uint64_t{3} << 51) + 12345}) {
    double want = -std::log(static_cast<double>(v) * 0x1.0p-53);
    EXPECT_NEAR(minus_ln(v), want, 1e-5) << v;
  }
  for (double x = 1; x <= 0x1.0p53; x *= 1.0137) {
    auto v = static_cast<uint64_t>(x);
    double want = -std::log(static_cast<double>(v) * 0x1.0p-53);
    ASSERT_NEAR(minus_ln(v), want, 1e-5) << v;
  }
  EXPECT_EQ(internal::minus_ln_q32(uint64_t{1} << 53), 0u);
}

// The chance a countdown runs out within an allocation, without libm:
// against libm's expm1 from a byte in a 2^40 mean to far past one mean,
// both sides of the switch at 1/2, and what is not a positive number.
TEST(Sampling, OneMinusExpNegMatchesLibm) {
  for (double x = 0x1.0p-40; x < 800; x *= 1.0071) {
    double want = -std::expm1(-x);
    ASSERT_NEAR(internal::one_minus_exp_neg(x), want, want * 1e-14) << x;
  }
  for (double x : {0.4999999999, 0.5, 0.5000000001, 0.6931471805599453, 1.0, 40.0, 700.0, 701.0}) {
    double want = -std::expm1(-x);
    EXPECT_NEAR(internal::one_minus_exp_neg(x), want, want * 1e-14) << x;
  }
  EXPECT_EQ(internal::one_minus_exp_neg(0), 0);
  EXPECT_EQ(internal::one_minus_exp_neg(-1), 0);
  EXPECT_EQ(internal::one_minus_exp_neg(std::nan("")), 0);
  EXPECT_EQ(internal::one_minus_exp_neg(1e300), 1);
}

// Means below 2^25 are drawn in 64-bit arithmetic, larger ones in 128: both.
TEST(Sampling, CountdownsAreExponentialWithTheGivenMean) {
  for (uint64_t period : {uint64_t{512} << 10, uint64_t{64} << 20}) {
    SCOPED_TRACE(period);
    constexpr int kDraws = 400000;
    uint64_t rng = 12345;
    double sum = 0;
    int below_mean = 0, beyond_three_means = 0;
    for (int i = 0; i < kDraws; ++i) {
      int64_t c = next_sample_countdown(period, &rng);
      ASSERT_GE(c, 1);
      sum += static_cast<double>(c);
      below_mean += c < static_cast<int64_t>(period);
      beyond_three_means += c > static_cast<int64_t>(3 * period);
    }
    // The mean's standard error is period / sqrt(draws), 0.16% here.
    EXPECT_NEAR(sum / kDraws / static_cast<double>(period), 1.0, 0.01);
    // P(X < mean) = 1 - 1/e, P(X > 3 mean) = e^-3 for an exponential.
    EXPECT_NEAR(static_cast<double>(below_mean) / kDraws, 1 - std::exp(-1.0), 0.005);
    EXPECT_NEAR(static_cast<double>(beyond_three_means) / kDraws, std::exp(-3.0), 0.003);
  }
}

TEST(Sampling, TheLargestPeriodsStayInRange) {
  uint64_t rng = 99;
  for (int i = 0; i < 1000; ++i) {
    int64_t c = next_sample_countdown(UINT64_MAX, &rng);
    EXPECT_GE(c, 1);
    EXPECT_LE(c, int64_t{1} << 62);
  }
}

TEST(Sampling, WithSamplingOffTheCountdownIsAProbeAndNoSample) {
  SampleDraws d{.rng = 1};
  EXPECT_GE(start_sample_countdown(0, &d), 1);
  EXPECT_EQ(d.mean, kSamplingProbeBytes);
  for (uint64_t size : {uint64_t{1}, uint64_t{1024}, uint64_t{1} << 30}) {
    CountdownEnd end = end_sample_countdown(0, size, &d);
    EXPECT_FALSE(end.sample) << size;
    EXPECT_GE(end.next, 1);
    EXPECT_EQ(d.mean, kSamplingProbeBytes);
  }
  // Turned off while a countdown of a period ran: no sample at its end.
  start_sample_countdown(4096, &d);
  EXPECT_FALSE(end_sample_countdown(0, 100, &d).sample);
  EXPECT_EQ(d.mean, kSamplingProbeBytes);
}

TEST(Sampling, TheEndOfACountdownOfThePeriodOrLongerIsASample) {
  SampleDraws d{.rng = 2};
  start_sample_countdown(4096, &d);
  for (int i = 0; i < 100; ++i) {
    CountdownEnd end = end_sample_countdown(4096, 16, &d);
    ASSERT_TRUE(end.sample);
    ASSERT_EQ(d.mean, 4096u);
  }
  // A shorter period than the running countdown's: its end is a sample, and
  // the next countdown has the new mean.
  start_sample_countdown(uint64_t{1} << 20, &d);
  EXPECT_TRUE(end_sample_countdown(1, 16, &d).sample);
  EXPECT_EQ(d.mean, 1u);
}

// A heap simulated as ThreadHeap runs it: `countdown -= size` per allocation,
// end_sample_countdown when it passes zero.
struct SimulatedHeap {
  SampleDraws draws;
  int64_t countdown;
  SimulatedHeap(uint64_t seed, uint64_t period) : draws{.rng = seed} {
    countdown = start_sample_countdown(period, &draws);
  }
  bool alloc(uint64_t size, uint64_t period) {
    if ((countdown -= static_cast<int64_t>(size)) >= 0) return false;
    CountdownEnd end = end_sample_countdown(period, size, &draws);
    countdown = end.next;
    return end.sample;
  }
};

// A heap made while sampling was off samples its first allocation after
// sampling is turned on with the chance a countdown of the period gives it,
// 1 - e^(-size/period), whatever its probe's state then: objects far below
// the probe's mean, about it, and far above it (the probe runs out in
// nearly every one of those, and keeping each with period's chance of 1 -
// e^-1 would undersample them). Each size in many heaps, each heap with a
// different amount allocated while sampling was off.
TEST(Sampling, AHeapMadeWhileSamplingWasOffSamplesItsFirstAllocationAfterAtThePeriodsRate) {
  constexpr uint64_t kPeriod = 4 * kSamplingProbeBytes;
  constexpr int kHeaps = 200000;
  for (uint64_t size : {uint64_t{1024}, kSamplingProbeBytes, 4 * kSamplingProbeBytes, 16 * kSamplingProbeBytes}) {
    SCOPED_TRACE(size);
    int sampled = 0;
    for (int h = 0; h < kHeaps; ++h) {
      SimulatedHeap heap(h + 1, 0);
      for (int i = h % 23; i > 0; --i) heap.alloc(1000 + 77 * (i % 13), 0);
      sampled += heap.alloc(size, kPeriod);
    }
    // Binomial: five standard deviations either side.
    double p = -std::expm1(-static_cast<double>(size) / kPeriod);
    double sd = std::sqrt(kHeaps * p * (1 - p));
    EXPECT_NEAR(sampled, kHeaps * p, 5 * sd) << "sampled with chance " << static_cast<double>(sampled) / kHeaps
                                              << ", not " << p;
  }
}

// And from then on at the period's rate: N bytes of objects of s bytes give
// N/s * (1 - e^(-s/period)) samples, whether the heap was made before
// sampling was on, or with it on.
TEST(Sampling, AHeapMadeWhileSamplingWasOffSamplesAtThePeriodsRateFromThenOn) {
  constexpr uint64_t kPeriod = 2 * kSamplingProbeBytes;
  constexpr uint64_t kSize = 1024, kObjects = 4000;
  constexpr int kHeaps = 1000;
  for (bool made_while_off : {true, false}) {
    SCOPED_TRACE(made_while_off);
    uint64_t samples = 0;
    for (int h = 0; h < kHeaps; ++h) {
      SimulatedHeap heap(h + 7, made_while_off ? 0 : kPeriod);
      for (int i = 0; i < 50; ++i) heap.alloc(kSize, made_while_off ? 0 : kPeriod);
      for (uint64_t i = 0; i < kObjects; ++i) samples += heap.alloc(kSize, kPeriod);
    }
    // Each allocation is sampled independently: binomial, five standard
    // deviations either side (about 2%).
    double p = -std::expm1(-static_cast<double>(kSize) / kPeriod);
    double n = static_cast<double>(kHeaps) * kObjects;
    EXPECT_NEAR(static_cast<double>(samples), n * p, 5 * std::sqrt(n * p * (1 - p)));
  }
}

TEST(Sampling, AZeroRandomStateStillDraws) {
  uint64_t rng = 0;
  EXPECT_GE(next_sample_countdown(4096, &rng), 1);
  EXPECT_NE(rng, 0u);
}

}  // namespace
}  // namespace memd::heap
