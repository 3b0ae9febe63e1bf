// The daemon dying at exact instants: every crash point (heap/crash_point.h)
// in the page heap, the lease service, region creation and recovery itself,
// at several passes. Honest clients keep working across each crash (they
// reconnect to the restarted daemon), and afterwards every object they
// published is intact and every region passes check.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "heap/crash_point.h"
#include "tests/daemon/raw_session.h"
#include "tests/daemon/test_util.h"

namespace memd {
namespace {

using namespace memd::testing;

struct Job {
  std::vector<std::string> options;
  std::vector<std::string> args;
};

// What the clients do, in order: small, medium, large and huge objects in
// a shm and a file region, frees (blocks and runs given back), and a client
// killed while it holds blocks (its lease is reclaimed).
std::vector<Job> workload() {
  return {
      {{}, {"crash-shm", "fill", "1", "3000", "24"}},
      {{"--file"}, {"crash-file", "fill", "2", "300", "3000"}},
      {{}, {"crash-shm", "fill", "3", "6", "1500000"}},
      {{}, {"crash-shm", "fill", "4", "200", "40000"}},
      {{}, {"crash-shm", "free", "3", "6", "1500000"}},
      {{"--file"}, {"crash-file", "fill", "5", "2000", "100"}},
      {{"--file"}, {"crash-file", "free", "2", "300", "3000"}},
      {{}, {"crash-new", "fill", "6", "100", "64"}},
  };
}

// The boards left published at the end, and how to verify each.
std::vector<Job> survivors() {
  return {
      {{}, {"crash-shm", "verify", "1", "3000", "24"}},
      {{}, {"crash-shm", "verify", "4", "200", "40000"}},
      {{"--file"}, {"crash-file", "verify", "5", "2000", "100"}},
      {{"--file"}, {"crash-file", "verify-half", "7", "1000", "48"}},
      {{}, {"crash-new", "verify", "6", "100", "64"}},
  };
}

// Runs `job` to its end, restarting the daemon (unarmed) whenever it dies
// at its crash point meanwhile. Returns the client's exit code.
int run_through_crashes(DaemonProcess& d, const Job& job, int* crashes) {
  pid_t client = start_client(d, job.options, job.args);
  if (client <= 0) return -1;  // not started: waitpid(-1) below would wait for any child
  for (;;) {
    int status = 0;
    pid_t done = waitpid(client, &status, WNOHANG);
    if (done == client) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    int code = d.exited();
    if (code != -1) {
      EXPECT_EQ(code, heap::kCrashExitCode) << "the daemon died otherwise\n" << d.log();
      ++*crashes;
      d.set_env({});
      d.start();
      EXPECT_TRUE(d.running()) << d.log();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void expect_survivors_and_check(DaemonProcess& d) {
  for (const Job& j : survivors()) EXPECT_EQ(run_client(d, j.options, j.args), 0) << j.args[0] << " " << j.args[2];
  RawSession s(d.socket());
  grpc::ClientContext c;
  RawSession::deadline(&c);
  v1::CheckRequest req;
  v1::CheckResponse resp;
  ASSERT_TRUE(s.admin->Check(&c, req, &resp).ok());
  EXPECT_EQ(resp.results_size(), 3);
  for (const v1::CheckResult& r : resp.results()) EXPECT_TRUE(r.ok()) << r.region() << ": " << r.message();
}

// A client that holds blocks until it is killed; killed at the end of the
// test whatever happened.
struct Holder {
  pid_t pid = -1;
  void kill_now() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      wait_exit(pid);
    }
    pid = -1;
  }
  ~Holder() { kill_now(); }
};

using PointAndPass = std::tuple<std::string, int>;

class DaemonCrashPoint : public ::testing::TestWithParam<PointAndPass> {};

TEST_P(DaemonCrashPoint, ClientsCarryOnAndPublishedObjectsSurvive) {
  auto [point, pass] = GetParam();
  DaemonProcess d;
  d.set_env({"MEMD_CRASH_AT=" + point + ":" + std::to_string(pass)});
  d.stop();
  d.start();
  ASSERT_TRUE(d.running()) << d.log();
  int crashes = 0;
  // A client killed while it holds blocks: its lease is reclaimed.
  Holder holder{start_client(d, {"--file"}, {"crash-file", "hold-half", "7", "1000", "48"}, d.dir() + "/holder.log")};
  ASSERT_TRUE(eventually([&] {
    if (d.exited() != -1) {
      ++crashes;
      d.set_env({});
      d.start();
    }
    return read_file(d.dir() + "/holder.log").find("ready") != std::string::npos;
  })) << d.log();
  for (const Job& j : workload()) {
    if (j.args[1] == "fill" && j.args[2] == "5") {
      holder.kill_now();
    }
    EXPECT_EQ(run_through_crashes(d, j, &crashes), 0) << j.args[0] << " " << j.args[2] << " " << j.args[3] << "\n"
                                                       << read_file(d.dir() + "/clients.log");
  }
  if (d.exited() != -1) ++crashes;
  if (!d.running()) {
    d.set_env({});
    d.start();
  }
  EXPECT_LE(crashes, 1);
  // Every point but repair (no block to repair while regions are made) is
  // passed by this workload: at its first pass, the daemon did die there.
  if (pass == 1 && point != "recovery.repair") {
    EXPECT_EQ(crashes, 1) << "the point was never reached";
  }
  // Killed between applying a lease call and keeping its answer: the next
  // daemon finished or undid that call before it served anyone (the client's
  // retry then got the right answer: the workload above verified its data).
  if (point == "lease.answer" && crashes == 1) {
    EXPECT_NE(d.log().find("was under way when the previous daemon stopped"), std::string::npos) << d.log();
  }
  // A clean restart too: what the crash left is what the next daemon serves.
  d.set_env({});
  ASSERT_EQ(d.stop(), 0) << d.log();
  d.start();
  ASSERT_TRUE(d.running()) << d.log();
  expect_survivors_and_check(d);
}

// Recovery interrupted: the daemon, killed with clients' objects in its
// regions, dies again while recovering them; the next start recovers.
class RecoveryCrashPoint : public ::testing::TestWithParam<PointAndPass> {};

TEST_P(RecoveryCrashPoint, RecoveryInterruptedLosesNothing) {
  auto [point, pass] = GetParam();
  DaemonProcess d;
  Holder holder{start_client(d, {"--file"}, {"crash-file", "hold-half", "7", "1000", "48"}, d.dir() + "/holder.log")};
  ASSERT_TRUE(eventually([&] { return read_file(d.dir() + "/holder.log").find("ready") != std::string::npos; }));
  for (const Job& j : workload()) {
    if (j.args[1] == "fill" && j.args[2] == "5") {
      holder.kill_now();
    }
    ASSERT_EQ(run_client(d, j.options, j.args), 0) << j.args[0] << " " << j.args[2];
  }
  d.kill_hard();
  d.set_env({"MEMD_CRASH_AT=" + point + ":" + std::to_string(pass)});
  d.start();
  // It dies at the point (a region had fewer passes: then it serves).
  if (!d.running() || eventually([&] { return !d.running() || d.exited() != -1; }, std::chrono::milliseconds(500))) {
    d.exited();
  }
  if (d.running()) d.kill_hard();
  d.set_env({});
  d.start();
  ASSERT_TRUE(d.running()) << d.log();
  expect_survivors_and_check(d);
  EXPECT_NE(d.log().find("crash point " + point), std::string::npos) << "the point was never reached";
}

std::string point_and_pass_name(const ::testing::TestParamInfo<PointAndPass>& info) {
  std::string name = std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param));
  for (char& c : name) {
    if (c == '.') c = '_';
  }
  return name;
}

// Recovery passes `slots` once per region (three here) and `repair` once
// per block in use.
INSTANTIATE_TEST_SUITE_P(EveryRecoveryPoint, RecoveryCrashPoint,
                         ::testing::Values(PointAndPass{"recovery.slots", 1}, PointAndPass{"recovery.slots", 2},
                                           PointAndPass{"recovery.slots", 3}, PointAndPass{"recovery.repair", 1},
                                           PointAndPass{"recovery.repair", 3}, PointAndPass{"recovery.repair", 9}),
                         point_and_pass_name);

INSTANTIATE_TEST_SUITE_P(
    EveryPoint, DaemonCrashPoint,
    ::testing::Combine(::testing::Values("page_heap.mark_in_use", "page_heap.free", "lease.grant", "lease.give_back",
                                         "lease.answer", "lease.reclaim", "lease.release_run", "daemon.create_intent",
                                         "daemon.create", "recovery.slots", "recovery.repair"),
                       ::testing::Values(1, 3, 9)),
    point_and_pass_name);

}  // namespace
}  // namespace memd
