// Telemetry end to end: real clients report to a real memd over their
// session streams; the daemon's /metrics (scraped over HTTP, checked by
// promtool) and heap profiles (Admin.Profile) show what they did. Also what
// a client cannot do with a report: invent regions or size classes.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>

#include "daemon_process.h"
#include "metrics_scrape.h"
#include "memd/v1/memd.grpc.pb.h"
#include "gunzip.h"
#include "raw_session.h"
#include "test_util.h"

namespace memd::testing {
namespace {

class TelemetryTest : public ::testing::Test {
 protected:
  // promtool's complaints about a scrape; empty if it has none.
  std::string promtool_check(const std::string& text) {
    std::string path = d_.dir() + "/metrics.txt";
    FILE* f = std::fopen(path.c_str(), "w");
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
    std::string cmd = "promtool check metrics < " + path + " > " + d_.dir() + "/promtool.out 2>&1";
    if (std::system(cmd.c_str()) == 0) return "";
    std::string out = read_file(d_.dir() + "/promtool.out");
    return out.empty() ? "promtool failed" : out;
  }
  void SetUp() override {
    // Clients report every 100 ms and sample one allocation per 16 KiB.
    setenv("MEMD_TELEMETRY_INTERVAL_MS", "100", 1);
    setenv("MEMD_SAMPLE_BYTES", "16384", 1);
    ASSERT_TRUE(d_.running()) << d_.log();
    address_ = metrics_address(d_);
    ASSERT_FALSE(address_.empty()) << d_.log();
  }
  void TearDown() override {
    unsetenv("MEMD_TELEMETRY_INTERVAL_MS");
    unsetenv("MEMD_SAMPLE_BYTES");
  }
  DaemonProcess d_;
  std::string address_;
};

TEST_F(TelemetryTest, ClientsShowUpInMetricsAndTotalsOutliveThem) {
  pid_t churn = start_client(d_, {}, {"tm", "churn", "1", "60"});
  std::string client = "client=\"test_client churn:" + std::to_string(churn) + "\"";
  std::string text;
  ASSERT_TRUE(eventually([&] {
    text = scrape(address_);
    return value_of(text, "memd_client_allocations_total", {client, "region=\"tm\""}) > 10000 &&
           value_of(text, "memd_allocation_site_allocated_bytes", {"region=\"tm\""}) > 0;
  })) << text << d_.log();
  EXPECT_EQ(value_of(text, "memd_client_info", {client}), 1);
  EXPECT_GT(value_of(text, "memd_client_frees_total", {client, "region=\"tm\""}), 0);
  EXPECT_GT(value_of(text, "memd_client_leased_blocks", {client, "region=\"tm\""}), 0);
  EXPECT_GT(value_of(text, "memd_client_samples_total", {client}), 0);
  EXPECT_GT(value_of(text, "memd_size_class_allocations_total", {"region=\"tm\"", "size_class=\"16\""}), 0);
  // The churn's 2-32 KiB objects: size classes up to 64 KiB (no size is large by default).
  EXPECT_GT(value_of(text, "memd_size_class_allocations_total", {"region=\"tm\"", "size_class=\"32768\""}), 0);
  EXPECT_GT(value_of(text, "memd_size_class_allocations_total", {"region=\"tm\"", "size_class=\"huge\""}), 0);
  EXPECT_GT(value_of(text, "memd_region_in_blocks_bytes", {"region=\"tm\""}), 0);
  EXPECT_GT(value_of(text, "memd_region_resident_bytes", {"region=\"tm\""}), 0);
  EXPECT_GE(value_of(text, "memd_region_fragmentation_ratio", {"region=\"tm\""}), 0);
  EXPECT_EQ(value_of(text, "memd_region_dead_client_leases", {"region=\"tm\""}), 0);
  EXPECT_GT(value_of(text, "memd_lease_rpc_duration_seconds_count", {"method=\"Lease\""}), 0);
  EXPECT_GT(value_of(text, "memd_rpcs_total", {"method=\"Lease\"", "code=\"OK\""}), 0);
  EXPECT_EQ(value_of(text, "memd_sessions", {"state=\"connected\""}), 1);
  // The stack of a sample reaches the program's own code.
  EXPECT_NE(text.find("site=\"main\""), std::string::npos) << text;

  // The client goes; the totals of its region stay (counters never go down).
  double before = value_of(text, "memd_size_class_allocations_total", {"region=\"tm\"", "size_class=\"16\""});
  kill(churn, SIGKILL);
  wait_exit(churn);
  ASSERT_TRUE(eventually([&] {
    text = scrape(address_);
    return value_of(text, "memd_client_info", {client}) < 0;
  })) << text;
  EXPECT_GE(value_of(text, "memd_size_class_allocations_total", {"region=\"tm\"", "size_class=\"16\""}), before);
  EXPECT_LT(value_of(text, "memd_client_allocations_total", {client}), 0);  // its series are gone
}

// With reports every ten minutes, a client's counts reach the daemon only
// through the last report of a region it closes, or of its session when it
// ends (the shim's: at exit): a short-lived program is counted all the same.
TEST_F(TelemetryTest, TheLastCountsOfAClientAreReportedWhenItClosesAndExits) {
  setenv("MEMD_TELEMETRY_INTERVAL_MS", "600000", 1);
  // A memd::Client: fills 3,000 objects of 16 bytes, closes the region, exits.
  ASSERT_EQ(run_client(d_, {}, {"last", "fill", "1", "3000", "16"}), 0) << d_.log();
  std::string text;
  ASSERT_TRUE(eventually([&] {
    text = scrape(address_);
    return value_of(text, "memd_size_class_allocations_total", {"region=\"last\"", "size_class=\"16\""}) >= 3000;
  })) << text;
  // The same region opened and closed again: its counts start from zero in
  // the client, and add to the region's totals.
  ASSERT_EQ(run_client(d_, {}, {"last", "fill", "2", "1000", "16"}), 0) << d_.log();
  ASSERT_TRUE(eventually([&] {
    text = scrape(address_);
    return value_of(text, "memd_size_class_allocations_total", {"region=\"last\"", "size_class=\"16\""}) >= 4000;
  })) << text;
  EXPECT_EQ(sum_of(text, "memd_telemetry_rejected_total", {}), 0) << text;
}

TEST_F(TelemetryTest, AProgramUnderTheShimShorterThanAReportIntervalIsCounted) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // A sanitizer's runtime must come first in a process: a sanitized shim
  // cannot be preloaded into an unsanitized program (the shim tests skip
  // these builds too).
  GTEST_SKIP() << "the shim is built with a sanitizer";
#endif
  setenv("MEMD_TELEMETRY_INTERVAL_MS", "600000", 1);
  // An unmodified program, reporting its process heap.
  std::string text = scrape(address_);
  double before = value_of(text, "memd_size_class_allocations_total", {"region=\"(process)\""});
  setenv("LD_PRELOAD", SHIM_LIBRARY, 1);
  setenv("MEMD_TELEMETRY", "1", 1);
  setenv("MEMD_SOCKET", d_.socket().c_str(), 1);
  pid_t ls = spawn_process({"/bin/ls", "-lR", "/usr/include/linux"}, d_.dir() + "/ls.log");
  unsetenv("LD_PRELOAD");
  unsetenv("MEMD_TELEMETRY");
  unsetenv("MEMD_SOCKET");
  ASSERT_EQ(wait_exit(ls), 0) << read_file(d_.dir() + "/ls.log");
  ASSERT_TRUE(eventually([&] {
    text = scrape(address_);
    return value_of(text, "memd_size_class_allocations_total", {"region=\"(process)\""}) > std::max(before, 0.0);
  })) << text << read_file(d_.dir() + "/ls.log");
}

TEST_F(TelemetryTest, ABadSettingIsReportedOnceAndItsDefaultStands) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the shim is built with a sanitizer";
#endif
  // The shim parses the settings, and so does its daemon link (a second
  // copy of the client code): one report, not two.
  unsetenv("MEMD_SAMPLE_BYTES");  // the fixture's, which would come first
  std::string log = d_.dir() + "/bad-setting.log";
  pid_t p = spawn_process({"/bin/true"}, log,
                          {"LD_PRELOAD=" SHIM_LIBRARY, "MEMD_TELEMETRY=1", "MEMD_SOCKET=" + d_.socket(),
                           "MEMD_SAMPLE_BYTES=lots"});
  ASSERT_EQ(wait_exit(p), 0) << read_file(log);
  std::string text = read_file(log);
  size_t first = text.find("memd: MEMD_SAMPLE_BYTES=lots: not a number of bytes");
  ASSERT_NE(first, std::string::npos) << text;
  EXPECT_EQ(text.find("MEMD_SAMPLE_BYTES", text.find('\n', first)), std::string::npos) << text;
  EXPECT_EQ(text.find("not reporting"), std::string::npos) << text;  // it reported all the same
}

// Producer and consumer: one process samples objects of a shared region,
// another frees them, and after the first has gone a third allocates the
// same sizes there, usually at the same offsets. The free of a sampled
// (marked) object is reported by whoever frees it, so the samples end then;
// asking the region at scrape time would find the third process's objects
// at their offsets (without the free reports, 5 runs in 6 fail here).
TEST_F(TelemetryTest, SamplesFreedByAnotherProcessEndEvenWhenTheirOffsetsAreReused) {
  setenv("MEMD_SAMPLE_BYTES", "1", 1);  // the producer samples every object
  pid_t producer = start_client(d_, {}, {"shared", "hold", "1", "200", "5000"});
  setenv("MEMD_SAMPLE_BYTES", "16384", 1);
  std::string text;
  ASSERT_TRUE(eventually([&] {
    text = scrape(address_);
    return sum_of(text, "memd_allocation_site_inuse_objects", {"region=\"shared\""}) >= 150;
  })) << text << d_.log();
  ASSERT_EQ(run_client(d_, {}, {"shared", "free", "1", "200", "5000"}), 0);
  kill(producer, SIGKILL);
  wait_exit(producer);
  setenv("MEMD_SAMPLE_BYTES", "0", 1);
  ASSERT_EQ(run_client(d_, {}, {"shared", "fill", "2", "200", "5000"}), 0);
  // What stays live of the producer's samples is its board (200 offsets,
  // 1,600 bytes), none of the objects of 5,000 bytes.
  ASSERT_TRUE(eventually([&] {
    text = scrape(address_);
    return sum_of(text, "memd_allocation_site_inuse_bytes", {"region=\"shared\""}) < 5000;
  })) << text;
}

TEST_F(TelemetryTest, MetricsPassPromtool) {
  pid_t c = start_client(d_, {}, {"lint", "churn", "2", "60"});
  std::string text;
  ASSERT_TRUE(eventually([&] {
    text = scrape(address_);
    return value_of(text, "memd_allocation_site_inuse_bytes") >= 0;
  })) << text;
  kill(c, SIGKILL);
  wait_exit(c);
  EXPECT_EQ(promtool_check(text), "");
}

// A program under the shim with call-chain pools (MEMD_CHAIN_POOLS=1): its
// classifier's decisions reach /metrics, each pool named by its chain's
// functions (chain_pool_program builds four lists, two through a wrapper).
TEST_F(TelemetryTest, TheCallChainPoolsOfAProgramUnderTheShimShowInMetrics) {
#ifndef CHAIN_POOL_PROGRAM
  GTEST_SKIP() << "the shim is built with a sanitizer";
#else
  setenv("LD_PRELOAD", SHIM_LIBRARY, 1);
  setenv("MEMD_TELEMETRY", "1", 1);
  setenv("MEMD_CHAIN_POOLS", "1", 1);
  setenv("MEMD_SOCKET", d_.socket().c_str(), 1);
  std::string log = d_.dir() + "/chains.log";
  pid_t p = spawn_process({CHAIN_POOL_PROGRAM, "hold"}, log);
  unsetenv("LD_PRELOAD");
  unsetenv("MEMD_TELEMETRY");
  unsetenv("MEMD_CHAIN_POOLS");
  unsetenv("MEMD_SOCKET");
  std::string client = "client=\"shim_chain_pool_program:" + std::to_string(p) + "\"";
  auto pool_of = [&](const std::string& text, const std::string& chain) {
    return value_of(text, "memd_client_chain_pool_info", {client, "chain=\"" + chain + "\""});
  };
  std::string text;
  bool seen = eventually([&] {
    text = scrape(address_);
    return value_of(text, "memd_client_chains_total", {client, "outcome=\"pooled\""}) >= 4 &&
           value_of(text, "memd_client_chains_total", {client, "outcome=\"wrapper\""}) >= 1 &&
           pool_of(text, "(anonymous namespace)::xnew() < (anonymous namespace)::node_d()") == 1;
  });
  kill(p, SIGKILL);
  wait_exit(p);
  ASSERT_TRUE(seen) << text << read_file(log);
  // The lists' own sites, and each caller of the wrapper with a chain one
  // address longer; the nodes are 40 bytes.
  EXPECT_EQ(pool_of(text, "(anonymous namespace)::node_a()"), 1) << text;
  EXPECT_EQ(pool_of(text, "(anonymous namespace)::node_b()"), 1) << text;
  EXPECT_EQ(pool_of(text, "(anonymous namespace)::xnew() < (anonymous namespace)::node_c()"), 1) << text;
  EXPECT_EQ(value_of(text, "memd_client_chain_pool_info",
                     {client, "chain=\"(anonymous namespace)::node_a()\"", "object_bytes=\"40\""}),
            1);
  EXPECT_GE(value_of(text, "memd_client_chains_seen_total", {client}), 5);
  EXPECT_GT(value_of(text, "memd_client_chain_unwinds_total", {client}), 0);
  EXPECT_EQ(value_of(text, "memd_client_chains_untracked_total", {client}), 0);
  EXPECT_EQ(sum_of(text, "memd_telemetry_rejected_total", {}), 0) << text;
  EXPECT_EQ(promtool_check(text), "");
  // The client's series go with it.
  ASSERT_TRUE(eventually([&] {
    text = scrape(address_);
    return value_of(text, "memd_client_chains_total", {client, "outcome=\"pooled\""}) < 0;
  })) << text;
#endif
}

TEST_F(TelemetryTest, ProfilesOfARegionNameTheProgramsFunctions) {
  pid_t c = start_client(d_, {}, {"prof", "churn", "3", "60"});
  RawSession s(d_.socket());
  v1::ProfileResponse resp;
  ASSERT_TRUE(eventually([&] {
    grpc::ClientContext ctx;
    RawSession::deadline(&ctx);
    v1::ProfileRequest req;
    req.set_region("prof");
    resp.Clear();
    return s.admin->Profile(&ctx, req, &resp).ok() && resp.samples() > 20;
  })) << d_.log();
  kill(c, SIGKILL);
  wait_exit(c);
  std::string raw = gunzip(resp.profile());
  ASSERT_FALSE(raw.empty());
  // The string table holds the function names of the sampled stacks.
  EXPECT_NE(raw.find("main"), std::string::npos);
  EXPECT_NE(raw.find("inuse_space"), std::string::npos);
  EXPECT_EQ(raw.find("memd::heap::ThreadHeap"), std::string::npos) << "allocator frames are cut";

  // Per client: a pid with no samples gives an empty profile, not an error.
  grpc::ClientContext ctx;
  RawSession::deadline(&ctx);
  v1::ProfileRequest req;
  req.set_region("prof");
  req.set_pid(1);
  v1::ProfileResponse none;
  ASSERT_TRUE(s.admin->Profile(&ctx, req, &none).ok());
  EXPECT_EQ(none.samples(), 0u);
}

TEST_F(TelemetryTest, BadProfileRequestsGetClearErrors) {
  RawSession s(d_.socket());
  auto profile = [&](const std::string& region) {
    grpc::ClientContext ctx;
    RawSession::deadline(&ctx);
    v1::ProfileRequest req;
    req.set_region(region);
    v1::ProfileResponse resp;
    return s.admin->Profile(&ctx, req, &resp);
  };
  grpc::Status st = profile("");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("(process)"), std::string::npos) << st.error_message();
  st = profile("no-such-region");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(profile("(process)").ok());
}

TEST_F(TelemetryTest, AReportCannotInventRegionsOrSizeClasses) {
  RawSession s(d_.socket());
  ASSERT_NE(s.id, 0u);
  v1::SessionRequest req;
  v1::TelemetryReport* r = req.mutable_telemetry();
  auto add = [&](const std::string& region, uint32_t size_class) {
    v1::HeapCounters* h = r->add_heaps();
    h->set_region(region);
    v1::ClassCounters* c = h->add_classes();
    c->set_size_class(size_class);
    c->set_allocations(5);
  };
  add("never-opened", 16);        // not attached: left out
  add("", 17);                    // not a size class: left out
  add("", 24);                    // the process heap, a real class: counted
  v1::Sample* sample = r->add_samples();
  sample->set_region("never-opened");
  sample->set_requested_bytes(100);
  for (int i = 0; i < 1000; ++i) sample->add_stack(static_cast<uint64_t>(i));
  v1::Symbol* sym = r->add_symbols();
  sym->set_address(1);
  sym->set_name(std::string(100000, 'x'));  // cut to a bounded length
  ASSERT_TRUE(s.stream->Write(req));
  std::string text;
  ASSERT_TRUE(eventually([&] {
    text = scrape(address_);
    return sum_of(text, "memd_telemetry_rejected_total", {}) >= 3;
  })) << text;
  EXPECT_EQ(text.find("never-opened"), std::string::npos);
  EXPECT_EQ(value_of(text, "memd_size_class_allocations_total", {"region=\"(process)\"", "size_class=\"24\""}), 5);
  EXPECT_LT(value_of(text, "memd_size_class_allocations_total", {"size_class=\"17\""}), 0);
  // The daemon still serves.
  v1::RegionInfo info;
  EXPECT_EQ(s.stat("never-opened", &info).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(TelemetryTest, ReportsWhileTheDaemonIsAwayAreDroppedAndCounted) {
  pid_t c = start_client(d_, {}, {"away", "churn", "4", "60"});
  std::string client = "client=\"test_client churn:" + std::to_string(c) + "\"";
  ASSERT_TRUE(eventually([&] { return value_of(scrape(address_), "memd_client_info", {client}) == 1; }));
  d_.kill_hard();
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // several report intervals
  d_.start();
  ASSERT_TRUE(d_.running()) << d_.log();
  address_ = metrics_address(d_);
  std::string text;
  ASSERT_TRUE(eventually([&] {
    text = scrape(address_);
    return value_of(text, "memd_client_telemetry_dropped_total", {client, "kind=\"reports\""}) > 0;
  })) << text;
  kill(c, SIGKILL);
  wait_exit(c);
}

}  // namespace
}  // namespace memd::testing
