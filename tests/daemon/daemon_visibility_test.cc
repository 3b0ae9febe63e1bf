// Who may call what, and see what (docs/daemon.md, "Who may call what"),
// walked through a real memd as two unprivileged users, A (nobody, 65534)
// and B (65533), with root's processes beside them. Each holds a session
// with a private region (0600) and sampled allocations whose function is
// named after its uid; root holds a region every user may use (0666). Then
// each user calls every RPC of the table about itself and about the other,
// with rpc_probe (a raw client) run as that user.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <regex>
#include <string>
#include <vector>

#include "daemon_process.h"
#include "metrics_scrape.h"
#include "test_util.h"

namespace memd::testing {
namespace {

constexpr int kOk = 0;
int refused(grpc::StatusCode code) { return 10 + static_cast<int>(code); }
const int kDenied = refused(grpc::StatusCode::PERMISSION_DENIED);
const int kNotYourSession = refused(grpc::StatusCode::UNAUTHENTICATED);

struct Holder {
  uid_t uid = 0;
  std::string region;  // its own
  pid_t pid = -1;
  std::string session;
  std::string handle;  // of `region`
  std::string secret() const { return "function secret_of_" + std::to_string(uid) + "\n"; }
};

class VisibilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "acting as users 65534 and 65533 needs root (setuid); run the test as root";
    ASSERT_TRUE(d_.running()) << d_.log();
    root_ = hold(0, "shared", "shared:0666");
    a_ = hold(65534, "a-private", "a-private:0600", "shared:0666");
    b_ = hold(65533, "b-private", "b-private:0600");
    metrics_address_ = metrics_address(d_);
    ASSERT_TRUE(eventually([&] { return value_of(scrape(metrics_address_), "memd_telemetry_reports_total") >= 3; }))
        << d_.log();
  }
  void TearDown() override {
    for (Holder* h : {&root_, &a_, &b_}) {
      if (h->pid > 0) {
        kill(h->pid, SIGKILL);
        wait_exit(h->pid);
      }
    }
  }

  // Until only the three holders are connected: a probe's session ends
  // when the daemon reads the end of its stream, after the probe exits.
  void settle() {
    ASSERT_TRUE(eventually([&] {
      return value_of(scrape(metrics_address_), "memd_sessions", {"state=\"connected\""}) == 3;
    })) << d_.log();
  }

  // rpc_probe as `uid` (0: root); its exit code, its output in `out`.
  int probe(uid_t uid, std::vector<std::string> args, std::string* out = nullptr) {
    std::vector<std::string> argv = {PROBE_BINARY};
    if (uid != 0) argv.insert(argv.end(), {"--uid", std::to_string(uid)});
    argv.push_back(d_.socket());
    argv.insert(argv.end(), args.begin(), args.end());
    std::string path = d_.dir() + "/probe-" + std::to_string(++probes_) + ".out";
    int rc = wait_exit(spawn_process(argv, path));
    if (out != nullptr) *out = read_file(path);
    return rc;
  }

  Holder hold(uid_t uid, const std::string& region, const std::string& spec, const std::string& spec2 = "") {
    Holder h;
    h.uid = uid;
    h.region = region;
    std::string path = d_.dir() + "/hold-" + std::to_string(uid) + ".out";
    std::vector<std::string> argv = {PROBE_BINARY};
    if (uid != 0) argv.insert(argv.end(), {"--uid", std::to_string(uid)});
    argv.insert(argv.end(), {d_.socket(), "hold", spec});
    if (!spec2.empty()) argv.push_back(spec2);
    h.pid = spawn_process(argv, path);
    std::string out;
    EXPECT_TRUE(eventually([&] { return (out = read_file(path)).find("ready\n") != std::string::npos; }))
        << out << d_.log();
    std::smatch m;
    if (std::regex_search(out, m, std::regex("session (\\d+)"))) h.session = m[1];
    if (std::regex_search(out, m, std::regex("handle " + region + " (\\d+)"))) h.handle = m[1];
    return h;
  }

  // Every row of the table, as `self`, about itself and about `other`.
  void walk(const Holder& self, const Holder& other) {
    SCOPED_TRACE("as uid " + std::to_string(self.uid));
    const uid_t me = self.uid;
    std::string out;
    // Sessions.Open: only as oneself.
    EXPECT_EQ(probe(me, {"claim-pid", std::to_string(other.pid)}), kDenied);
    // Regions.Open: by the region's mode.
    EXPECT_EQ(probe(me, {"open", other.region}), kDenied);
    EXPECT_EQ(probe(me, {"open", "shared"}), kOk);
    // Regions.Close, Leases.*: only in one's own session.
    EXPECT_EQ(probe(me, {"close", other.session, other.handle}), kNotYourSession);
    EXPECT_EQ(probe(me, {"lease", other.session, other.handle}), kNotYourSession);
    // Regions.List, Stat: the regions one may read.
    EXPECT_EQ(probe(me, {"regions"}, &out), kOk);
    EXPECT_NE(out.find("region " + self.region + "\n"), std::string::npos) << out;
    EXPECT_NE(out.find("region shared\n"), std::string::npos) << out;
    EXPECT_EQ(out.find(other.region), std::string::npos) << out;
    EXPECT_EQ(probe(me, {"stat", self.region}), kOk);
    EXPECT_EQ(probe(me, {"stat", other.region}), kDenied);
    // Regions.Remove: the owner's (and root's).
    EXPECT_EQ(probe(me, {"remove", other.region}), kDenied);
    EXPECT_EQ(probe(me, {"remove", "shared"}), kDenied);
    // Admin.Check, Compact: regions one may read.
    EXPECT_EQ(probe(me, {"check", other.region}), kDenied);
    EXPECT_EQ(probe(me, {"check", ""}, &out), kOk);
    EXPECT_EQ(out.find(other.region), std::string::npos) << out;
    EXPECT_EQ(probe(me, {"compact", other.region}), kDenied);
    // Admin.Drain: one's own processes.
    EXPECT_EQ(probe(me, {"drain", std::to_string(other.pid)}), kDenied);
    EXPECT_EQ(probe(me, {"drain", std::to_string(self.pid)}), kOk);
    // Admin.ListClients: one's own processes, their regions one may read.
    EXPECT_EQ(probe(me, {"clients"}, &out), kOk);
    EXPECT_NE(out.find("pid=" + std::to_string(self.pid) + " uid=" + std::to_string(me)), std::string::npos) << out;
    EXPECT_NE(out.find("lease " + self.region + "\n"), std::string::npos) << out;
    for (const std::string& hidden : {"pid=" + std::to_string(other.pid) + " ", "pid=" + std::to_string(root_.pid) + " ",
                                      other.region, std::string("uid=0 ")}) {
      EXPECT_EQ(out.find(hidden), std::string::npos) << hidden << " in\n" << out;
    }
    // Admin.Stats: counts of what one may see (its hold and the probe's own
    // session, once the sessions of the probes before have ended).
    settle();
    EXPECT_EQ(probe(me, {"stats"}, &out), kOk);
    EXPECT_EQ(out, "regions=2 sessions=2\n");
    // Admin.Profile: samples of one's own processes only, no other user's
    // functions or return addresses.
    EXPECT_EQ(probe(me, {"profile", "(process)", "0"}, &out), kOk);
    EXPECT_NE(out.find("samples=1\n"), std::string::npos) << out;
    EXPECT_NE(out.find(self.secret()), std::string::npos) << out;
    for (const Holder* h : std::initializer_list<const Holder*>{&other, &root_}) {
      EXPECT_EQ(out.find(h->secret()), std::string::npos) << out;
      char address[32];
      std::snprintf(address, sizeof address, "address 0x%x\n", 0x5eed0000 + h->uid);
      EXPECT_EQ(out.find(address), std::string::npos) << out;
    }
    EXPECT_EQ(probe(me, {"profile", "shared", "0"}, &out), kOk);
    EXPECT_EQ(out.find(root_.secret()), std::string::npos) << out;
    EXPECT_EQ(probe(me, {"profile", "(process)", std::to_string(other.pid)}), kDenied);
    EXPECT_EQ(probe(me, {"profile", other.region, "0"}), kDenied);
    // grpc.health.v1: anyone.
    EXPECT_EQ(probe(me, {"health"}), kOk);
  }

  DaemonProcess d_;
  std::string metrics_address_;
  Holder root_, a_, b_;
  int probes_ = 0;
};

TEST_F(VisibilityTest, EachUserSeesItsOwnProcessesAndTheRegionsItMayRead) {
  walk(a_, b_);
  walk(b_, a_);
  // A's samples in the region it shares with root: its own only.
  std::string out;
  EXPECT_EQ(probe(a_.uid, {"profile", "shared", "0"}, &out), kOk);
  EXPECT_NE(out.find(a_.secret()), std::string::npos) << out;
}

TEST_F(VisibilityTest, RootSeesEveryone) {
  std::string out;
  EXPECT_EQ(probe(0, {"clients"}, &out), kOk);
  for (const Holder* h : {&root_, &a_, &b_}) {
    EXPECT_NE(out.find("pid=" + std::to_string(h->pid) + " uid=" + std::to_string(h->uid)), std::string::npos) << out;
  }
  EXPECT_NE(out.find("lease b-private\n"), std::string::npos) << out;
  EXPECT_EQ(probe(0, {"profile", "(process)", "0"}, &out), kOk);
  for (const Holder* h : {&root_, &a_, &b_}) EXPECT_NE(out.find(h->secret()), std::string::npos) << out;
  settle();
  EXPECT_EQ(probe(0, {"stats"}, &out), kOk);
  EXPECT_EQ(out, "regions=3 sessions=4\n");
}

}  // namespace
}  // namespace memd::testing
