// One local user cannot take what every user shares: sessions per process
// and per uid, connections per uid and regions per uid are bounded (refused
// with RESOURCE_EXHAUSTED naming the limit's key, a connection closed at
// once), and another user is served all along. Clients run as `nobody` and
// as a uid of no account (4242); root is exempt.
#include <gtest/gtest.h>
#include <poll.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <fstream>

#include "tests/daemon/test_util.h"

namespace memd {
namespace {

using namespace memd::testing;

constexpr const char* kOtherUid = "4242";

std::string nobody_uid() {
  passwd* pw = getpwnam("nobody");
  return pw != nullptr ? std::to_string(pw->pw_uid) : "";
}

// Threads of a process, from /proc/<pid>/status.
int threads_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

TEST(DaemonLimits, OneProcessAndOneUserCannotTakeEverySession) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run clients as other users";
  DaemonProcess d({"--max-sessions-per-process", "6", "--max-sessions-per-uid", "10"});
  ASSERT_TRUE(d.running()) << d.log();
  std::string uid = nobody_uid();
  int threads_before = threads_of(d.pid());

  // One process opens sessions until refused: it gets the process limit.
  std::string log_a = d.dir() + "/a.log";
  pid_t a = start_client(d, {"--uid", uid}, {"-", "sessions-hold", "1000"}, log_a);
  ASSERT_TRUE(eventually([&] { return read_file(log_a).find("ready") != std::string::npos; }, std::chrono::seconds(120)))
      << read_file(log_a);
  EXPECT_NE(read_file(log_a).find("sessions 6\n"), std::string::npos) << read_file(log_a);
  EXPECT_NE(read_file(log_a).find("max-sessions-per-process"), std::string::npos) << read_file(log_a);

  // A second process of the same user: what is left of the user's limit.
  std::string log_b = d.dir() + "/b.log";
  EXPECT_EQ(wait_exit(start_client(d, {"--uid", uid}, {"-", "sessions", "1000"}, log_b)),
            client_status_exit(absl::StatusCode::kResourceExhausted));
  EXPECT_NE(read_file(log_b).find("sessions 4\n"), std::string::npos) << read_file(log_b);
  EXPECT_NE(read_file(log_b).find("max-sessions-per-uid"), std::string::npos) << read_file(log_b);

  // Another user still opens a session and allocates.
  EXPECT_EQ(run_client(d, {"--uid", kOtherUid}, {"other", "fill", "1", "100", "32"}), 0) << d.log();
  // A thread per session held (10), and gRPC's few spare ones.
  EXPECT_LE(threads_of(d.pid()), threads_before + 10 + 16);
  kill(a, SIGKILL);
  wait_exit(a);
}

TEST(DaemonLimits, OneUserCannotOwnEveryRegion) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run clients as other users";
  DaemonProcess d({"--max-regions-per-uid", "2"});
  ASSERT_TRUE(d.running()) << d.log();
  std::string uid = nobody_uid();
  std::string log = d.dir() + "/regions.log";
  auto open_as = [&](const std::string& who, const std::string& region) {
    return wait_exit(start_client(d, {"--uid", who}, {region, "open"}, log));
  };
  EXPECT_EQ(open_as(uid, "mine-1"), 0);
  EXPECT_EQ(open_as(uid, "mine-2"), 0);
  EXPECT_EQ(open_as(uid, "mine-3"), client_status_exit(absl::StatusCode::kResourceExhausted));
  EXPECT_NE(read_file(log).find("max-regions-per-uid"), std::string::npos) << read_file(log);
  EXPECT_EQ(open_as(uid, "mine-1"), 0);  // opening one it owns is not creating
  EXPECT_EQ(run_client(d, {"--uid", kOtherUid}, {"theirs", "fill", "1", "100", "32"}), 0) << d.log();
}

// A child as `nobody` connects `count` times and reports how many of its
// connections the daemon closed; it keeps them open until `release` closes.
pid_t connect_as(uid_t uid, const std::string& socket_path, int count, int report[2], int release[2]) {
  pid_t child = fork();
  if (child != 0) {
    close(report[1]);
    close(release[0]);
    return child;
  }
  close(report[0]);
  close(release[1]);
  if (setgid(uid) != 0 || setuid(uid) != 0) _exit(2);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, socket_path.c_str(), sizeof a.sun_path - 1);
  std::vector<int> fds;
  for (int i = 0; i < count; ++i) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) _exit(3);
    fds.push_back(fd);
  }
  // Closed means end of file (gRPC's settings frame may come first).
  std::vector<bool> closed(fds.size(), false);
  auto count_closed = [&] {
    int n = 0;
    for (size_t i = 0; i < fds.size(); ++i) {
      char buf[4096];
      while (!closed[i]) {
        ssize_t r = recv(fds[i], buf, sizeof buf, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) closed[i] = true;
        if (r <= 0) break;
      }
      n += closed[i];
    }
    return n;
  };
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (count_closed() < count / 2 && std::chrono::steady_clock::now() < until) usleep(10'000);
  usleep(300'000);  // more would close now, if any
  char n = static_cast<char>(count_closed());
  (void)!write(report[1], &n, 1);
  (void)!read(release[0], &n, 1);
  _exit(0);
}

TEST(DaemonLimits, OneUserCannotTakeEveryConnection) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run clients as other users";
  DaemonProcess d({"--max-connections-per-uid", "4", "--handshake-timeout", "600"});
  ASSERT_TRUE(d.running()) << d.log();
  passwd* nobody = getpwnam("nobody");
  ASSERT_NE(nobody, nullptr);
  int report[2], release[2];
  ASSERT_EQ(pipe(report), 0);
  ASSERT_EQ(pipe(release), 0);
  pid_t child = connect_as(nobody->pw_uid, d.socket(), 8, report, release);
  char closed = -1;
  ASSERT_EQ(read(report[0], &closed, 1), 1);
  EXPECT_EQ(closed, 4) << "of 8 connections, those beyond max-connections-per-uid (4) are closed";
  // While they are held: the same user cannot connect, another user can.
  EXPECT_EQ(run_client(d, {"--uid", std::to_string(nobody->pw_uid)}, {"nobodys", "fill", "1", "10", "32"}),
            client_status_exit(absl::StatusCode::kUnavailable));
  EXPECT_EQ(run_client(d, {"--uid", kOtherUid}, {"theirs", "fill", "1", "100", "32"}), 0) << d.log();
  EXPECT_NE(d.log().find("max-connections-per-uid"), std::string::npos) << d.log();
  close(release[1]);
  close(report[0]);
  EXPECT_EQ(wait_exit(child), 0);
}

}  // namespace
}  // namespace memd
