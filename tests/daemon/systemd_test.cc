// memd under systemd, with systemd's own protocols and tools: readiness
// (Type=notify) heard on a real notify socket, and socket activation through
// systemd-socket-activate, which binds the socket, waits for the first
// connection and execs memd with it as descriptor 3 (what memd.socket does).
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "gtest/gtest.h"
#include "tests/daemon/test_util.h"

namespace memd {
namespace {

using namespace memd::testing;

// A scratch directory with a data directory and an shm namespace of its own.
struct Scratch {
  Scratch() {
    std::string tmpl = std::filesystem::temp_directory_path().string() + "/memd-systemd-XXXXXX";
    dir = mkdtemp(tmpl.data()) ? tmpl : "";
    chmod(dir.c_str(), 0755);
    static int counter = 0;
    ns = "sd" + std::to_string(getpid()) + "-" + std::to_string(counter++);
  }
  ~Scratch() {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
      if (e.path().filename().string().rfind("memd." + ns + ".", 0) == 0) std::filesystem::remove(e.path(), ec);
    }
    std::filesystem::remove_all(dir, ec);
  }
  std::vector<std::string> memd(const std::string& socket) const {
    return {MEMD_BINARY, "--socket", socket, "--data-dir", dir + "/data", "--shm-namespace", ns,
            "--metrics-address", "127.0.0.1:0"};
  }
  std::string log() const { return read_file(dir + "/memd.log"); }
  std::string dir;
  std::string ns;
};

// The service manager's end of NOTIFY_SOCKET: a datagram socket at `address`
// ('@' for an abstract one, as systemd may use).
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& address) : address_(address) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, address.data(), address.size());
    socklen_t len = offsetof(sockaddr_un, sun_path) + address.size();
    if (address[0] == '@') a.sun_path[0] = '\0';
    bound_ = bind(fd_, reinterpret_cast<sockaddr*>(&a), len) == 0;
  }
  ~NotifySocket() { close(fd_); }
  bool bound() const { return bound_; }
  // The next message, or "" if none came within 60 s.
  std::string next() {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 60'000) != 1) return "";
    char buf[4096];
    ssize_t n = recv(fd_, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, n) : "";
  }

 private:
  std::string address_;
  int fd_ = -1;
  bool bound_ = false;
};

bool has_line(const std::string& message, const std::string& line) {
  return ("\n" + message + "\n").find("\n" + line + "\n") != std::string::npos;
}

void expect_ready_then_stopping(const std::string& notify_address) {
  Scratch s;
  NotifySocket notify(notify_address);
  ASSERT_TRUE(notify.bound()) << std::strerror(errno);
  std::string sock = s.dir + "/memd.sock";
  pid_t memd = spawn_process(s.memd(sock), s.dir + "/memd.log", {"NOTIFY_SOCKET=" + notify_address});
  ASSERT_GT(memd, 0);
  std::string ready = notify.next();
  // Ready means serving: the socket takes a client the moment systemd hears it.
  bool answers = socket_answers(sock);
  EXPECT_TRUE(has_line(ready, "READY=1")) << "\"" << ready << "\"\n" << s.log();
  EXPECT_TRUE(has_line(ready, "MAINPID=" + std::to_string(memd))) << ready;
  EXPECT_TRUE(has_line(ready, "STATUS=serving on " + sock)) << ready;
  EXPECT_TRUE(answers) << "READY=1 came before the socket accepted connections\n" << s.log();
  ClientOptions o;
  o.socket = sock;
  absl::StatusOr<std::unique_ptr<Client>> c = Client::connect(o);
  EXPECT_TRUE(c.ok()) << c.status();
  c->reset();
  ASSERT_EQ(kill(memd, SIGTERM), 0);
  EXPECT_TRUE(has_line(notify.next(), "STOPPING=1")) << s.log();
  EXPECT_EQ(wait_exit(memd), 0) << s.log();
}

TEST(Systemd, NotifiesReadyOnceTheSocketAcceptsAndStoppingAtShutdown) {
  Scratch s;  // only for a directory of its own
  expect_ready_then_stopping(s.dir + "/notify");
}

TEST(Systemd, NotifiesAnAbstractNotifySocket) {
  expect_ready_then_stopping("@memd-test-notify-" + std::to_string(getpid()));
}

TEST(Systemd, WithoutNotifySocketNothingIsSentAndMemdServes) {
  Scratch s;
  std::string sock = s.dir + "/memd.sock";
  pid_t memd = spawn_process(s.memd(sock), s.dir + "/memd.log");
  ASSERT_TRUE(eventually([&] { return socket_answers(sock); })) << s.log();
  kill(memd, SIGTERM);
  EXPECT_EQ(wait_exit(memd), 0) << s.log();
  EXPECT_EQ(s.log().find("notify"), std::string::npos) << s.log();
}

TEST(Systemd, ServesTheActivatedSocketItsFirstConnectionIncludedAndLeavesItToSystemd) {
  Scratch s;
  std::string sock = s.dir + "/memd.sock";
  std::vector<std::string> argv = {"/usr/bin/systemd-socket-activate", "-l", sock, "--"};
  std::vector<std::string> memd = s.memd(sock);
  argv.insert(argv.end(), memd.begin(), memd.end());
  pid_t pid = spawn_process(argv, s.dir + "/memd.log");
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(eventually([&] { return std::filesystem::exists(sock); })) << s.log();
  // memd is not running yet: this connection is what starts it, and it
  // waits in the socket's backlog while memd starts.
  ClientOptions o;
  o.socket = sock;
  absl::StatusOr<std::unique_ptr<Client>> c = Client::connect(o);
  ASSERT_TRUE(c.ok()) << c.status() << "\n" << s.log();
  absl::StatusOr<std::unique_ptr<Region>> r = (*c)->open("activated", region_options());
  ASSERT_TRUE(r.ok()) << r.status();
  void* p = (*r)->alloc(100);
  EXPECT_NE(p, nullptr);
  (*r)->free(p);
  r->reset();
  c->reset();
  EXPECT_NE(s.log().find("(socket from systemd)"), std::string::npos) << s.log();
  ASSERT_EQ(kill(pid, SIGTERM), 0);  // systemd-socket-activate exec'd memd: same pid
  EXPECT_EQ(wait_exit(pid), 0) << s.log();
  // systemd's socket, not memd's: it stays for the next start.
  EXPECT_TRUE(std::filesystem::exists(sock)) << "memd removed the socket systemd passed it";
}

TEST(Systemd, RefusesAnActivatedSocketBoundToAnotherPath) {
  Scratch s;
  std::string passed = s.dir + "/passed.sock";
  std::string configured = s.dir + "/memd.sock";
  std::vector<std::string> argv = {"/usr/bin/systemd-socket-activate", "-l", passed, "--"};
  std::vector<std::string> memd = s.memd(configured);
  argv.insert(argv.end(), memd.begin(), memd.end());
  pid_t pid = spawn_process(argv, s.dir + "/memd.log");
  ASSERT_TRUE(eventually([&] { return std::filesystem::exists(passed); })) << s.log();
  EXPECT_TRUE(socket_answers(passed));  // starts memd
  EXPECT_EQ(wait_exit(pid), 1) << s.log();
  std::string log = s.log();
  EXPECT_NE(log.find("bound to \"" + passed + "\""), std::string::npos) << log;
  EXPECT_NE(log.find("socket setting is \"" + configured + "\""), std::string::npos) << log;
  EXPECT_FALSE(std::filesystem::exists(configured));
}

// LISTEN_* that name another process (inherited by mistake) are not memd's:
// it binds its own socket. A count other than one socket is refused.
TEST(Systemd, IgnoresAnotherProcesssListenFdsAndRefusesMoreThanOneSocket) {
  Scratch s;
  std::string sock = s.dir + "/memd.sock";
  pid_t memd = spawn_process(s.memd(sock), s.dir + "/memd.log",
                             {"LISTEN_PID=" + std::to_string(getpid()), "LISTEN_FDS=1"});
  ASSERT_TRUE(eventually([&] { return socket_answers(sock); })) << s.log();
  kill(memd, SIGTERM);
  EXPECT_EQ(wait_exit(memd), 0) << s.log();
  EXPECT_EQ(s.log().find("socket from systemd"), std::string::npos) << s.log();

  // Through a shell, so that LISTEN_PID is memd's own pid (exec keeps it).
  std::string command = "LISTEN_PID=$$ LISTEN_FDS=2 exec";
  for (const std::string& a : s.memd(s.dir + "/two.sock")) command += " '" + a + "'";
  pid_t two = spawn_process({"/bin/sh", "-c", command}, s.dir + "/two.log");
  EXPECT_EQ(wait_exit(two), 1);
  EXPECT_NE(read_file(s.dir + "/two.log").find("LISTEN_FDS=2"), std::string::npos) << read_file(s.dir + "/two.log");
}

// The unit runs memd as user memd with CAP_CHOWN, CAP_FOWNER and
// CAP_DAC_OVERRIDE only (User=, AmbientCapabilities=). So run, it still gives
// each region's object to the client that created it, and a restarted memd
// reopens objects that are not its own.
TEST(Systemd, ServesAsItsOwnUserWithTheUnitsThreeCapabilities) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to switch user";
  Scratch s;
  constexpr uid_t kMemdUid = 64123;  // stands for the memd system user
  ASSERT_EQ(chown(s.dir.c_str(), kMemdUid, kMemdUid), 0);
  std::string sock = s.dir + "/memd.sock";
  std::vector<std::string> argv = {"/usr/bin/setpriv", "--reuid=" + std::to_string(kMemdUid),
                                   "--regid=" + std::to_string(kMemdUid), "--clear-groups",
                                   "--inh-caps=-all,+chown,+fowner,+dac_override",
                                   "--ambient-caps=+chown,+fowner,+dac_override",
                                   "--bounding-set=-all,+chown,+fowner,+dac_override"};
  std::vector<std::string> memd = s.memd(sock);
  argv.insert(argv.end(), memd.begin(), memd.end());
  argv.insert(argv.end(), {"--socket-mode", "0666"});
  auto start = [&] {
    pid_t pid = spawn_process(argv, s.dir + "/memd.log");
    EXPECT_TRUE(eventually([&] { return socket_answers(sock); })) << s.log();
    return pid;
  };
  auto client = [&](const std::vector<std::string>& options, const std::string& region, const std::string& job) {
    std::vector<std::string> args = {TEST_CLIENT, "--uid", "65534"};
    args.insert(args.end(), options.begin(), options.end());
    args.insert(args.end(), {sock, region, job, "1", "500", "48"});
    pid_t pid = spawn_process(args, s.dir + "/clients.log");
    return pid > 0 ? wait_exit(pid) : -1;
  };
  pid_t pid = start();
  EXPECT_EQ(client({}, "in-shm", "fill"), 0) << read_file(s.dir + "/clients.log") << s.log();
  EXPECT_EQ(client({"--file"}, "in-file", "fill"), 0) << read_file(s.dir + "/clients.log") << s.log();
  struct stat st {};
  ASSERT_EQ(stat(("/dev/shm/memd." + s.ns + ".in-shm").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat((s.dir + "/data/regions/in-file.region").c_str(), &st), 0) << s.log();
  EXPECT_EQ(st.st_uid, 65534u);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid), 0) << s.log();

  pid = start();
  EXPECT_EQ(client({}, "in-shm", "verify"), 0) << read_file(s.dir + "/clients.log") << s.log();
  EXPECT_EQ(client({"--file"}, "in-file", "verify"), 0) << read_file(s.dir + "/clients.log") << s.log();
  EXPECT_EQ(s.log().find("cannot chown"), std::string::npos) << s.log();
  kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid), 0) << s.log();
}

}  // namespace
}  // namespace memd
