// The exponential draw behind allocation sampling (heap/sampling.h): -ln in
// fixed point against libm, and the countdowns' distribution.
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

TEST(Sampling, CountdownsAreExponentialWithTheGivenMean) {
  constexpr uint64_t kPeriod = 512 * 1024;
  constexpr int kDraws = 400000;
  uint64_t rng = 12345;
  double sum = 0;
  int below_mean = 0, beyond_three_means = 0;
  for (int i = 0; i < kDraws; ++i) {
    int64_t c = next_sample_countdown(kPeriod, &rng);
    ASSERT_GE(c, 1);
    sum += static_cast<double>(c);
    below_mean += c < static_cast<int64_t>(kPeriod);
    beyond_three_means += c > static_cast<int64_t>(3 * kPeriod);
  }
  // The mean's standard error is period / sqrt(draws), 0.16% here.
  EXPECT_NEAR(sum / kDraws / kPeriod, 1.0, 0.01);
  // P(X < mean) = 1 - 1/e, P(X > 3 mean) = e^-3 for an exponential.
  EXPECT_NEAR(static_cast<double>(below_mean) / kDraws, 1 - std::exp(-1.0), 0.005);
  EXPECT_NEAR(static_cast<double>(beyond_three_means) / kDraws, std::exp(-3.0), 0.003);
}

TEST(Sampling, TheLargestPeriodsStayInRange) {
  uint64_t rng = 99;
  for (int i = 0; i < 1000; ++i) {
    int64_t c = next_sample_countdown(UINT64_MAX, &rng);
    EXPECT_GE(c, 1);
    EXPECT_LE(c, int64_t{1} << 62);
  }
}

TEST(Sampling, NoPeriodMeansLookAgainLater) {
  uint64_t rng = 1;
  EXPECT_EQ(next_sample_countdown(0, &rng), kSamplingRecheckBytes);
}

TEST(Sampling, AZeroRandomStateStillDraws) {
  uint64_t rng = 0;
  EXPECT_GE(next_sample_countdown(4096, &rng), 1);
  EXPECT_NE(rng, 0u);
}

}  // namespace
}  // namespace memd::heap
