// Settings from the environment (region/options.h): what parses, what is
// refused (and then left to the caller's default).
#include "region/options.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace memd::region {
namespace {

class TelemetrySettingsTest : public ::testing::Test {
 protected:
  void SetUp() override { setenv("MEMD_QUIET", "1", 1); }
  void TearDown() override {
    for (const char* v : {"MEMD_QUIET", "MEMD_TELEMETRY", "MEMD_SAMPLE_BYTES", "MEMD_TELEMETRY_INTERVAL_MS",
                          "MEMD_ROOTS_LOCK_TIMEOUT_MS"}) {
      unsetenv(v);
    }
  }
};

TEST_F(TelemetrySettingsTest, UnsetMeansTheCallersDefault) {
  TelemetrySettings t = telemetry_settings();
  EXPECT_EQ(t.enabled, -1);
  EXPECT_EQ(t.sample_bytes, -1);
  EXPECT_EQ(t.interval_ms, -1);
  setenv("MEMD_SAMPLE_BYTES", "", 1);
  EXPECT_EQ(telemetry_settings().sample_bytes, -1);
}

TEST_F(TelemetrySettingsTest, SampleBytesTakeBinarySuffixes) {
  const std::pair<const char*, int64_t> cases[] = {
      {"0", 0}, {"1", 1}, {"524288", 524288}, {"512K", 524288}, {"512k", 524288},
      {"2M", 2 << 20}, {"1G", int64_t{1} << 30}, {"8589934592", int64_t{8} << 30}};
  for (auto [text, want] : cases) {
    setenv("MEMD_SAMPLE_BYTES", text, 1);
    EXPECT_EQ(telemetry_settings().sample_bytes, want) << text;
  }
}

TEST_F(TelemetrySettingsTest, WhatIsNotANumberIsRefused) {
  for (const char* text : {"lots", "-5", " 5", "5 ", "12x", "1KB", "K", "0x10", "99999999999999999999",
                           "9223372036854775807K"}) {
    setenv("MEMD_SAMPLE_BYTES", text, 1);
    EXPECT_EQ(telemetry_settings().sample_bytes, -1) << text;
  }
  for (const char* text : {"0", "-1", "1s", "fast"}) {
    setenv("MEMD_TELEMETRY_INTERVAL_MS", text, 1);
    EXPECT_EQ(telemetry_settings().interval_ms, -1) << text;
  }
  setenv("MEMD_TELEMETRY_INTERVAL_MS", "250", 1);
  EXPECT_EQ(telemetry_settings().interval_ms, 250);
  setenv("MEMD_TELEMETRY_INTERVAL_MS", "1K", 1);  // a count, not bytes
  EXPECT_EQ(telemetry_settings().interval_ms, -1);
}

TEST_F(TelemetrySettingsTest, TelemetryIsANumber) {
  setenv("MEMD_TELEMETRY", "0", 1);
  EXPECT_EQ(telemetry_settings().enabled, 0);
  setenv("MEMD_TELEMETRY", "1", 1);
  EXPECT_EQ(telemetry_settings().enabled, 1);
  setenv("MEMD_TELEMETRY", "yes", 1);
  EXPECT_EQ(telemetry_settings().enabled, -1);
}

// The roots lock's bound: milliseconds, at least 1; anything else leaves
// the default (10 s).
class RootsLockTimeoutTest : public TelemetrySettingsTest {};

TEST_F(RootsLockTimeoutTest, IsPositiveMilliseconds) {
  EXPECT_EQ(roots_lock_timeout_ms(), 10000u);
  setenv("MEMD_ROOTS_LOCK_TIMEOUT_MS", "250", 1);
  EXPECT_EQ(roots_lock_timeout_ms(), 250u);
  for (const char* text : {"0", "-1", "1s", "forever", ""}) {
    setenv("MEMD_ROOTS_LOCK_TIMEOUT_MS", text, 1);
    EXPECT_EQ(roots_lock_timeout_ms(), 10000u) << text;
  }
}

// The one size parser of every setting, the daemon's configuration included.
TEST(ParseBytes, TakesAWholeNumberAndABinarySuffixAndNothingElse) {
  const std::pair<const char*, uint64_t> good[] = {
      {"0", 0}, {"7", 7}, {"64M", uint64_t{64} << 20}, {"2g", uint64_t{2} << 30}, {"1T", uint64_t{1} << 40},
      {"18446744073709551615", UINT64_MAX}, {"16777215T", uint64_t{16777215} << 40}};
  for (auto [text, want] : good) {
    uint64_t got = 0;
    EXPECT_TRUE(parse_bytes(text, &got)) << text;
    EXPECT_EQ(got, want) << text;
  }
  for (const char* text : {"", "K", "-1", "+1", " 1", "1 ", "1KB", "1.5G", "0x10", "lots",
                           "18446744073709551616", "16777216T", "99999999999999999999999"}) {
    uint64_t got = 12345;
    EXPECT_FALSE(parse_bytes(text, &got)) << text;
    EXPECT_EQ(got, 12345u) << text;  // untouched
  }
}

}  // namespace
}  // namespace memd::region
