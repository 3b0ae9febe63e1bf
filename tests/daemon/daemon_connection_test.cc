// Connections that never speak, and the descriptor limit: a daemon whose
// RLIMIT_NOFILE is low is flooded with connections that send nothing. It
// must not spin on accept nor flood its log, it must close the silent
// connections after handshake-timeout, and then serve a real client again.
// Connections that spoke and went quiet are closed after idle-timeout,
// but never one holding a session stream (libmemd holds one for its life).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <pwd.h>

#include "tests/daemon/metrics_scrape.h"
#include "tests/daemon/raw_session.h"
#include "tests/daemon/test_util.h"

namespace memd {
namespace {

using namespace memd::testing;

// utime + stime of a process, in clock ticks (/proc/<pid>/stat).
long cpu_ticks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string f;
  long utime = 0, stime = 0;
  for (int i = 3; fields >> f; ++i) {
    if (i == 14) utime = std::stol(f);
    if (i == 15) {
      stime = std::stol(f);
      break;
    }
  }
  return utime + stime;
}

size_t open_descriptors(pid_t pid) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    (void)e;
    ++n;
  }
  return n;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

int connect_silently(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the daemon has closed its end (reads what gRPC sent first).
bool closed_by_daemon(int fd) {
  char buf[4096];
  for (;;) {
    ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (r == 0) return true;
    if (r < 0) return errno != EAGAIN && errno != EINTR;
  }
}

// The UBSan reports in a daemon's log that are not the false "invalid vptr"
// of a vptr check made at the descriptor limit (tests/support/
// ubsan_options.c): the runtime could not probe the memory (no pipe), so
// it could print none of it either. A report's lines are looked for among
// the few after it, since the daemon's threads log in between.
std::vector<std::string> real_ubsan_reports(const std::string& log) {
  std::vector<std::string> lines;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::vector<std::string> real;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find("runtime error:") == std::string::npos) continue;
    bool vptr = lines[i].find("which does not point to an object of type") != std::string::npos;
    bool invalid = false, unprinted = false;
    for (size_t j = i + 1; j < lines.size() && j <= i + 6; ++j) {
      if (lines[j].find("runtime error:") != std::string::npos) break;
      invalid |= lines[j].find("note: object has invalid vptr") != std::string::npos;
      unprinted |= lines[j] == "<memory cannot be printed>";
    }
    if (!(vptr && invalid && unprinted)) real.push_back(lines[i]);
  }
  return real;
}

TEST(DaemonConnections, UbsanReportsAtTheDescriptorLimitAreToldFromRealOnes) {
  std::string log =
      "x.h:1:2: runtime error: member call on address 0x1 which does not point to an object of type 'T'\n"
      "2026-11-30T06:04:52.705Z memd warning: accept: Too many open files\n"
      "0x1: note: object has invalid vptr\n<memory cannot be printed>\n    #0 0x5 in f\n"
      "y.cc:3:4: runtime error: member call on address 0x2 which does not point to an object of type 'U'\n"
      "0x2: note: object has invalid vptr\n 00 00 00 00\n"
      "z.cc:5:6: runtime error: signed integer overflow\n"
      "w.cc:7:8: runtime error: member call on address 0x3 which does not point to an object of type 'V'\n";
  std::vector<std::string> real = real_ubsan_reports(log);
  ASSERT_EQ(real.size(), 3u);
  EXPECT_NE(real[0].find("y.cc:3:4"), std::string::npos);
  EXPECT_NE(real[1].find("z.cc:5:6"), std::string::npos);
  EXPECT_NE(real[2].find("w.cc:7:8"), std::string::npos);
}

TEST(DaemonConnections, SilentConnectionsAtTheDescriptorLimitAreClosedAndServiceResumes) {
  constexpr int kTimeout = 4;  // handshake-timeout, seconds
  // Under AddressSanitizer, vptr checks at the descriptor limit report and
  // go on; the end of the test checks that they are all false ones.
  DaemonProcess d({"--handshake-timeout", std::to_string(kTimeout)}, {"/usr/bin/env", "MEMD_UBSAN_VPTR_REPORT_ONLY=1"});
  ASSERT_TRUE(d.running()) << d.log();
  // Room for a few connections only.
  rlimit low{};
  low.rlim_cur = low.rlim_max = open_descriptors(d.pid()) + 24;
  ASSERT_EQ(prlimit(d.pid(), RLIMIT_NOFILE, &low, nullptr), 0) << std::strerror(errno);

  // More connections than fit; all wait in the backlog or are accepted.
  std::vector<int> silent;
  for (int i = 0; i < 60; ++i) {
    int fd = connect_silently(d.socket());
    ASSERT_GE(fd, 0) << std::strerror(errno);
    silent.push_back(fd);
  }
  ASSERT_TRUE(eventually([&] { return d.log().find("Too many open files") != std::string::npos; }))
      << "accept never reached the limit:\n" << d.log();

  // At the limit: the daemon waits instead of spinning. Half a second of
  // CPU in two seconds is far above waiting and far below a spinning loop.
  long before = cpu_ticks(d.pid());
  std::this_thread::sleep_for(std::chrono::seconds(2));
  long used = cpu_ticks(d.pid()) - before;
  EXPECT_LT(used, sysconf(_SC_CLK_TCK) / 2) << "CPU ticks at the descriptor limit";

  // Every silent connection is closed by the daemon, those in the backlog
  // once they have been accepted and have had their time.
  EXPECT_TRUE(eventually(
      [&] {
        size_t closed = 0;
        for (int fd : silent) closed += closed_by_daemon(fd);
        return closed == silent.size();
      },
      std::chrono::seconds(20 * kTimeout)));
  for (int fd : silent) close(fd);
  // And a real client is served again.
  EXPECT_EQ(run_client(d, {}, {"afterwards", "fill", "1", "100", "32"}), 0) << d.log();
  std::string log = d.log();
  EXPECT_LE(count(log, "Too many open files"), 12u) << log;
  EXPECT_NE(log.find("handshake-timeout"), std::string::npos) << log;
  EXPECT_TRUE(real_ubsan_reports(log).empty()) << log;
}

constexpr int kIdleTimeout = 1;  // idle-timeout of the daemons below, seconds

// A channel with a connection of its own (channels of one process share
// connections otherwise), that has made one call.
std::shared_ptr<grpc::Channel> connection_that_made_a_call(const DaemonProcess& d) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel("unix:" + d.socket(), grpc::InsecureChannelCredentials(), args);
  grpc::ClientContext c;
  RawSession::deadline(&c);
  v1::StatsResponse stats;
  grpc::Status s = v1::Admin::NewStub(channel)->Stats(&c, v1::StatsRequest(), &stats);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(channel->GetState(false), GRPC_CHANNEL_READY);
  return channel;
}

// Whether the channel's connection ends (it leaves READY) within `limit`.
bool connection_ends(grpc::Channel* channel, std::chrono::seconds limit) {
  return channel->WaitForStateChange(GRPC_CHANNEL_READY, std::chrono::system_clock::now() + limit) &&
         channel->GetState(false) != GRPC_CHANNEL_READY;
}

double closed_idle(const std::string& metrics) {
  return value_of(scrape(metrics), "memd_connections_closed_total", {"reason=\"idle_timeout\""});
}

TEST(DaemonConnections, AConnectionThatMadeACallAndWentQuietIsClosedAfterIdleTimeout) {
  DaemonProcess d({"--idle-timeout", std::to_string(kIdleTimeout)});
  ASSERT_TRUE(d.running()) << d.log();
  std::string metrics = metrics_address(d);
  ASSERT_FALSE(metrics.empty()) << d.log();
  std::shared_ptr<grpc::Channel> quiet = connection_that_made_a_call(d);
  // The bound is generous; the daemon closes it about a second after its call.
  EXPECT_TRUE(connection_ends(quiet.get(), std::chrono::seconds(20 * kIdleTimeout)))
      << "the daemon never closed a connection with no call in progress\n" << d.log();
  EXPECT_GE(closed_idle(metrics), 1) << scrape(metrics);
  // Logged just after the connection is closed and counted.
  EXPECT_TRUE(eventually([&] { return d.log().find("idle connection(s)") != std::string::npos; })) << d.log();
  // A client that comes back on the same channel simply connects again.
  grpc::ClientContext c;
  RawSession::deadline(&c);
  v1::StatsResponse stats;
  EXPECT_TRUE(v1::Admin::NewStub(quiet)->Stats(&c, v1::StatsRequest(), &stats).ok());
}

TEST(DaemonConnections, AConnectionHoldingASessionStreamIsNeverIdle) {
  DaemonProcess d({"--idle-timeout", std::to_string(kIdleTimeout)});
  ASSERT_TRUE(d.running()) << d.log();
  std::string metrics = metrics_address(d);
  ASSERT_FALSE(metrics.empty()) << d.log();
  RawSession session(d.socket(), 0, /*own_connection=*/true);
  ASSERT_NE(session.id, 0u) << session.refused.error_message();
  v1::RegionInfo info;
  EXPECT_EQ(session.stat("no-such-region", &info).error_code(), grpc::StatusCode::NOT_FOUND);  // a unary call too

  // A connection whose last call came after every call of the session's:
  // once the daemon has closed it, the session's connection was past the
  // same deadline (and was swept in the same pass).
  std::shared_ptr<grpc::Channel> later = connection_that_made_a_call(d);
  ASSERT_TRUE(connection_ends(later.get(), std::chrono::seconds(20 * kIdleTimeout))) << d.log();
  std::this_thread::sleep_for(std::chrono::seconds(2 * kIdleTimeout));

  EXPECT_EQ(session.channel->GetState(false), GRPC_CHANNEL_READY);
  // The stream still carries reports (a closed one could not).
  v1::SessionRequest report;
  report.mutable_telemetry()->set_rpcs(1);
  ASSERT_TRUE(session.stream->Write(report)) << d.log();
  EXPECT_TRUE(eventually([&] { return value_of(scrape(metrics), "memd_telemetry_reports_total") >= 1; }))
      << d.log();
  std::string text = scrape(metrics);
  EXPECT_EQ(value_of(text, "memd_sessions", {"state=\"connected\""}), 1) << text;
  EXPECT_EQ(session.channel->GetState(false), GRPC_CHANNEL_READY);
}

// Each connection takes two descriptors; memd takes the hard limit as its
// soft one, or a default soft limit of 1024 would bound it to ~500 clients.
TEST(DaemonConnections, TheDescriptorLimitIsRaisedToTheHardLimit) {
  std::string dir = std::filesystem::temp_directory_path().string() + "/memd-nofile-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::string log = dir + "/memd.log";
  pid_t daemon = spawn_process({"/usr/bin/prlimit", "--nofile=256:4096", MEMD_BINARY, "--socket", dir + "/memd.sock",
                                "--data-dir", dir + "/data", "--shm-namespace", "nofile" + std::to_string(getpid()),
                                "--metrics-address", "127.0.0.1:0"},
                               log);
  EXPECT_TRUE(eventually([&] { return read_file(log).find("serving on") != std::string::npos; })) << read_file(log);
  rlimit now{};
  ASSERT_EQ(prlimit(daemon, RLIMIT_NOFILE, nullptr, &now), 0) << std::strerror(errno);
  EXPECT_EQ(now.rlim_cur, 4096u);
  kill(daemon, SIGTERM);
  EXPECT_EQ(wait_exit(daemon), 0) << read_file(log);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

// Without MEMD_SOCKET and XDG_RUNTIME_DIR, memd and libmemd agree on one
// absolute default, so a program started in another directory finds the
// daemon (it used to look for ./run/memd.sock where it stood).
TEST(DaemonSocket, TheDefaultSocketIsFoundFromAnyDirectory) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run the daemon as another user";
  passwd* nobody = getpwnam("nobody");
  ASSERT_NE(nobody, nullptr);
  std::string uid = std::to_string(nobody->pw_uid);
  std::string base = std::filesystem::temp_directory_path().string();
  std::string daemon_dir = base + "/memd-default-daemon-" + std::to_string(getpid());
  std::string client_dir = base + "/memd-default-client-" + std::to_string(getpid());
  std::filesystem::create_directories(daemon_dir);
  std::filesystem::create_directories(client_dir);
  ASSERT_EQ(chown(daemon_dir.c_str(), nobody->pw_uid, nobody->pw_gid), 0);
  std::string ns = "dflt" + std::to_string(getpid());
  std::string expected = "/tmp/memd-" + uid + "/memd.sock";
  std::string log = daemon_dir + "/memd.log";
  pid_t daemon = spawn_process({"/usr/bin/env", "-u", "MEMD_SOCKET", "-u", "XDG_RUNTIME_DIR", "-C", daemon_dir,
                                "setpriv", "--reuid=" + uid, "--regid=" + std::to_string(nobody->pw_gid),
                                "--clear-groups", MEMD_BINARY, "--shm-namespace", ns, "--metrics-address",
                                "127.0.0.1:0"},
                               log);
  EXPECT_TRUE(eventually([&] { return read_file(log).find("serving on") != std::string::npos; })) << read_file(log);
  EXPECT_NE(read_file(log).find("serving on " + expected), std::string::npos) << read_file(log);
  // A client elsewhere, with the same (empty) environment: an empty socket
  // argument is the default.
  pid_t client = spawn_process({"/usr/bin/env", "-u", "MEMD_SOCKET", "-u", "XDG_RUNTIME_DIR", "-C", client_dir,
                                TEST_CLIENT, "--uid", uid, "", "found", "fill", "1", "100", "32"},
                               client_dir + "/client.log");
  EXPECT_EQ(wait_exit(client), 0) << read_file(client_dir + "/client.log") << read_file(log);
  kill(daemon, SIGTERM);
  EXPECT_EQ(wait_exit(daemon), 0) << read_file(log);
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    if (e.path().filename().string().rfind("memd." + ns + ".", 0) == 0) std::filesystem::remove(e.path(), ec);
  }
  std::filesystem::remove_all(daemon_dir, ec);
  std::filesystem::remove_all(client_dir, ec);
}

}  // namespace
}  // namespace memd
