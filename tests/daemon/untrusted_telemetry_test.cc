// What one hostile client can do with its session stream and its hello,
// through a real memd: a raw session (not libmemd) sends what no client
// library would, and the daemon's memory, its /metrics (checked by
// promtool), memdctl and the daemon's log stay sound for everyone else.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "daemon_process.h"
#include "metrics_scrape.h"
#include "raw_session.h"
#include "test_util.h"

namespace memd::testing {
namespace {

// VmRSS of a process, in bytes; -1 if unknown.
int64_t resident_bytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

bool promtool_passes(const DaemonProcess& d, const std::string& text, std::string* output) {
  std::string path = d.dir() + "/metrics.txt";
  std::ofstream(path) << text;
  std::string cmd = "promtool check metrics < " + path + " > " + d.dir() + "/promtool.out 2>&1";
  int rc = std::system(cmd.c_str());
  *output = read_file(d.dir() + "/promtool.out");
  return rc == 0;
}

class UntrustedTelemetryTest : public ::testing::Test {
 protected:
  explicit UntrustedTelemetryTest(std::vector<std::string> daemon_args = {}) : d_(std::move(daemon_args)) {}
  void SetUp() override {
    ASSERT_TRUE(d_.running()) << d_.log();
    address_ = metrics_address(d_);
    ASSERT_FALSE(address_.empty()) << d_.log();
  }
  // Sends `r` on the session and waits until the daemon has taken it
  // (reports_total counts it).
  void send(RawSession& s, const v1::TelemetryReport& r) {
    v1::SessionRequest req;
    *req.mutable_telemetry() = r;
    ASSERT_TRUE(s.stream->Write(req));
    ++sent_;
    ASSERT_TRUE(eventually([&] { return value_of(scrape(address_), "memd_telemetry_reports_total") >= sent_; }))
        << d_.log();
  }
  DaemonProcess d_;
  std::string address_;
  double sent_ = 0;
};

// 30 reports, 3.9 MB on the wire: per report 200 new names of 480 bytes and
// 200 samples of 64 frames, half of them naming the same 32 functions
// (repeated names), half the report's own (distinct names). Stored a name
// per frame, that was 6,000 * 64 names: over 200 MB in the daemon.
TEST_F(UntrustedTelemetryTest, OneSessionsTelemetryIsBoundedAndGoesWithIt) {
  constexpr uint64_t kBudget = uint64_t{8} << 20;  // telemetry-bytes-per-session, default
  constexpr int64_t kRssBound = 64 << 20;           // the budget, reports in flight, gRPC's buffers
  auto session = std::make_unique<RawSession>(d_.socket());
  ASSERT_NE(session->id, 0u);
  send(*session, v1::TelemetryReport());
  const int64_t rss_before = resident_bytes(d_.pid());
  ASSERT_GT(rss_before, 0);
  for (uint64_t report = 1; report <= 30; ++report) {
    v1::TelemetryReport r;
    r.set_sample_period_bytes(1 << 19);
    if (report == 1) {
      for (uint64_t pc = 1; pc <= 32; ++pc) {
        v1::Symbol* sym = r.add_symbols();
        sym->set_address(pc);
        sym->set_name("common::function_" + std::to_string(pc) + std::string(460, 'c'));
      }
    }
    for (uint64_t k = 0; k < 200; ++k) {
      v1::Symbol* sym = r.add_symbols();
      sym->set_address(report * 1000 + k);
      sym->set_name("distinct::function_" + std::to_string(report * 1000 + k) + std::string(460, 'd'));
    }
    for (uint64_t i = 0; i < 200; ++i) {
      v1::Sample* sample = r.add_samples();
      sample->set_address((report * 1000 + i) * 64);
      sample->set_requested_bytes(64);
      for (uint64_t f = 0; f < 64; ++f) sample->add_stack(f % 2 == 0 ? 1 + f / 2 : report * 1000 + (i + f) % 200);
    }
    send(*session, r);
  }
  std::string text = scrape(address_);
  const double stored = value_of(text, "memd_telemetry_stored_bytes");
  EXPECT_GT(stored, 0) << text;
  EXPECT_LE(stored, static_cast<double>(kBudget)) << text;
  EXPECT_GT(value_of(text, "memd_telemetry_rejected_total", {"reason=\"session_bytes\""}), 0) << text;
  const int64_t rss_after = resident_bytes(d_.pid());
  (void)kRssBound;
  (void)rss_after;
#if !defined(MEMD_SANITIZER_ADDRESS)
  // AddressSanitizer keeps freed memory in quarantine (256 MiB by default),
  // so there the daemon's resident size says nothing about what it keeps;
  // the store's own count above still bounds it.
  EXPECT_LT(rss_after - rss_before, kRssBound) << "VmRSS " << rss_before << " -> " << rss_after;
#endif

  // The session ends: its process-heap samples and names go, every byte.
  session.reset();
  ASSERT_TRUE(eventually([&] {
    text = scrape(address_);
    return value_of(text, "memd_sessions", {"state=\"connected\""}) == 0;
  })) << text;
  EXPECT_EQ(value_of(text, "memd_telemetry_stored_bytes"), 0) << text;
}

// Budgets small enough to fill in a few reports.
constexpr uint64_t kBytesPerSession = uint64_t{1} << 20;
constexpr uint64_t kBytesPerUid = uint64_t{2} << 20;

class UidTelemetryBudgetTest : public UntrustedTelemetryTest {
 protected:
  UidTelemetryBudgetTest()
      : UntrustedTelemetryTest({"--telemetry-bytes-per-session", std::to_string(kBytesPerSession),
                                "--telemetry-bytes-per-uid", std::to_string(kBytesPerUid)}) {}
};

// One process opens sessions up to its limit and fills each one's budget
// with distinct symbols: once, that was the per-session budget times the
// sessions of a uid (1 GiB with the defaults).
TEST_F(UidTelemetryBudgetTest, TheSessionsOfOneUserStoreNoMoreThanItsBudget) {
  constexpr int kSessions = 5;
  std::vector<std::unique_ptr<RawSession>> sessions;
  for (int i = 0; i < kSessions; ++i) {
    sessions.push_back(std::make_unique<RawSession>(d_.socket()));
    ASSERT_NE(sessions.back()->id, 0u) << sessions.back()->refused.error_message();
  }
  for (int i = 0; i < kSessions; ++i) {
    for (uint64_t report = 0; report < 3; ++report) {  // 3 * 800 names of ~480 bytes: over a session's budget
      v1::TelemetryReport r;
      for (uint64_t k = 0; k < 800; ++k) {
        uint64_t pc = (static_cast<uint64_t>(i) * 10 + report) * 1000 + k;
        v1::Symbol* sym = r.add_symbols();
        sym->set_address(pc);
        sym->set_name("distinct::function_" + std::to_string(pc) + std::string(460, 'd'));
      }
      send(*sessions[i], r);
    }
  }
  std::string text = scrape(address_);
  const double stored = value_of(text, "memd_telemetry_stored_bytes");
  EXPECT_LE(stored, static_cast<double>(kBytesPerUid)) << text;
  EXPECT_GT(stored, static_cast<double>(kBytesPerSession)) << "more than one session stored\n" << text;
  EXPECT_GT(value_of(text, "memd_telemetry_rejected_total", {"reason=\"uid_bytes\""}), 0) << text;

  sessions.clear();
  ASSERT_TRUE(eventually([&] {
    text = scrape(address_);
    return value_of(text, "memd_sessions", {"state=\"connected\""}) == 0;
  })) << text;
  EXPECT_EQ(value_of(text, "memd_telemetry_stored_bytes"), 0) << text;
}

TEST_F(UidTelemetryBudgetTest, APerUidBudgetBelowThePerSessionOneIsRefused) {
  std::string out = d_.dir() + "/refused.out";
  int rc = wait_exit(spawn_process({MEMD_BINARY, "--telemetry-bytes-per-session", "8M", "--telemetry-bytes-per-uid",
                                    "4M", "--print-config"},
                                   out));
  EXPECT_EQ(rc, 2) << read_file(out);
  EXPECT_NE(read_file(out).find("telemetry-bytes-per-uid (4194304) must be at least telemetry-bytes-per-session"),
            std::string::npos)
      << read_file(out);
}

v1::TelemetryReport counters(uint64_t allocations, uint64_t allocated_bytes, uint64_t rpcs) {
  v1::TelemetryReport r;
  v1::ClassCounters* c = r.add_heaps()->add_classes();  // the process heap
  c->set_size_class(16);
  c->set_allocations(allocations);
  c->set_allocated_bytes(allocated_bytes);
  r.set_rpcs(rpcs);
  return r;
}

// A Prometheus counter once went 1.8e19 -> 5 because a client said so.
TEST_F(UntrustedTelemetryTest, CountersThatGoBackOrLeapAreRefusedAndNeverExported) {
  RawSession s(d_.socket());
  ASSERT_NE(s.id, 0u);
  const std::vector<std::string> process16 = {"region=\"(process)\"", "size_class=\"16\""};
  const std::string client = "client=\"raw session:" + std::to_string(getpid()) + "\"";
  send(s, counters(5, 80, 7));
  std::string text = scrape(address_);
  ASSERT_EQ(value_of(text, "memd_size_class_allocations_total", process16), 5) << text;
  ASSERT_EQ(value_of(text, "memd_client_rpcs_total", {client}), 7) << text;

  send(s, counters(18'000'000'000'000'000'000u, 80, 18'000'000'000'000'000'000u));  // above 2^62
  send(s, counters(3, 80, 2));                                                     // back
  send(s, counters(6, uint64_t{1} << 61, 8));  // 2^61 bytes since the last report: a leap
  text = scrape(address_);
  EXPECT_EQ(value_of(text, "memd_size_class_allocations_total", process16), 5) << text;
  EXPECT_EQ(value_of(text, "memd_size_class_allocated_bytes_total", process16), 80) << text;
  EXPECT_EQ(value_of(text, "memd_client_rpcs_total", {client}), 8) << text;
  EXPECT_EQ(value_of(text, "memd_telemetry_rejected_total", {"reason=\"counter_too_large\""}), 2) << text;
  EXPECT_EQ(value_of(text, "memd_telemetry_rejected_total", {"reason=\"counter_decreased\""}), 2) << text;
  EXPECT_EQ(value_of(text, "memd_telemetry_rejected_total", {"reason=\"counter_jump\""}), 1) << text;

  // Counting on from where it was is fine.
  send(s, counters(9, 144, 9));
  text = scrape(address_);
  EXPECT_EQ(value_of(text, "memd_size_class_allocations_total", process16), 9) << text;
  EXPECT_EQ(value_of(text, "memd_size_class_allocated_bytes_total", process16), 144) << text;
}

// Hello.program: 199 ASCII bytes (with a newline, a NUL, and a forged log
// line after the newline) and U+202E, then a 4-byte emoji across byte 200.
TEST_F(UntrustedTelemetryTest, AHostileProgramNameBlindsNeitherMetricsNorMemdctlNorTheLog) {
  const std::string forged = "2026-01-01T00:00:00.000Z memd error: forged by a client";
  std::string program = "memdtest\n" + forged + std::string(1, '\0') + "\xE2\x80\xAE" + "gnp.exe";
  program += std::string(199 - program.size(), 'x');
  program += "\xF0\x9F\x98\x80";  // U+1F600
  ASSERT_EQ(program.size(), 203u);
  RawSession s(d_.socket(), 0, true, program);
  ASSERT_NE(s.id, 0u) << s.refused.error_message();

  std::string text;
  ASSERT_TRUE(eventually([&] {
    text = scrape(address_);
    return text.find("program=\"memdtest") != std::string::npos;
  })) << text;
  std::string promtool;
  EXPECT_TRUE(promtool_passes(d_, text, &promtool)) << promtool;

  std::string out = d_.dir() + "/memdctl.out";
  int rc = wait_exit(spawn_process({MEMDCTL_BINARY, "--socket", d_.socket(), "clients"}, out));
  EXPECT_EQ(rc, 0) << read_file(out);
  EXPECT_NE(read_file(out).find("memdtest"), std::string::npos) << read_file(out);

  std::string log = d_.log();
  EXPECT_NE(log.find("memdtest"), std::string::npos) << log;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) EXPECT_NE(line.rfind(forged, 0), 0u) << line;
  EXPECT_EQ(log.find('\0'), std::string::npos);
  EXPECT_EQ(log.find("\xE2\x80\xAE"), std::string::npos);
}

}  // namespace
}  // namespace memd::testing
