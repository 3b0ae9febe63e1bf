// A real memd for tests: the daemon binary started as a child process with
// its own socket, data directory and shm namespace (tests run in parallel),
// stopped with SIGTERM or killed with SIGKILL, and restarted on the same
// data. Its log goes to a file the test can read.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace memd::testing {

// Runs `argv` as a child with stdout and stderr to `log` (if not empty).
inline pid_t spawn_process(const std::vector<std::string>& argv, const std::string& log = "",
                           const std::vector<std::string>& extra_env = {}) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (!log.empty()) {
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  for (const std::string& e : extra_env) env_strings.push_back(e);
  std::vector<char*> env;
  for (std::string& e : env_strings) env.push_back(e.data());
  env.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, args[0], &fa, nullptr, args.data(), env.data()) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

// Waits for a child; its exit code, or 128 + signal.
inline int wait_exit(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

inline bool socket_answers(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

class DaemonProcess {
 public:
  // `wrapper` runs the daemon (e.g. nsenter into a mount namespace).
  explicit DaemonProcess(std::vector<std::string> extra_args = {}, std::vector<std::string> wrapper = {})
      : extra_(std::move(extra_args)), wrapper_(std::move(wrapper)) {
    const char* base = getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/memd-daemon-XXXXXX";
    dir_ = mkdtemp(tmpl.data()) ? tmpl : "";
    // Other users reach the socket (their requests are judged by the daemon).
    chmod(dir_.c_str(), 0755);
    static int counter = 0;
    ns_ = "t" + std::to_string(getpid()) + "-" + std::to_string(counter++);
    start();
  }
  ~DaemonProcess() {
    if (pid_ > 0) stop();
    // shm objects of this namespace
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
      if (e.path().filename().string().rfind("memd." + ns_ + ".", 0) == 0) std::filesystem::remove(e.path(), ec);
    }
    if (getenv("MEMD_KEEP_TEST_DIRS") == nullptr) std::filesystem::remove_all(dir_, ec);
  }

  void start() {
    // MEMD_TEST_DAEMON runs the tests against another build of memd (an
    // older one, to see a test fail without the fix it tests).
    const char* other = getenv("MEMD_TEST_DAEMON");
    std::string binary = other != nullptr && *other != '\0' ? other : MEMD_BINARY;
    std::vector<std::string> argv = wrapper_;
    argv.insert(argv.end(), {binary, "--socket", socket(), "--data-dir", dir_ + "/data", "--shm-namespace", ns_,
                             "--log-level", "info"});
    // A port of its own: tests run daemons side by side.
    if (std::find(extra_.begin(), extra_.end(), "--metrics-address") == extra_.end()) {
      argv.insert(argv.end(), {"--metrics-address", "127.0.0.1:0"});
    }
    argv.insert(argv.end(), extra_.begin(), extra_.end());
    pid_ = spawn_process(argv, log_path(), env_);
    for (int i = 0; i < 1000 && !socket_answers(socket()); ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  // SIGTERM: a clean shutdown. Returns the exit code.
  int stop() {
    kill(pid_, SIGTERM);
    int code = wait_exit(pid_);
    pid_ = -1;
    return code;
  }
  void kill_hard() {
    kill(pid_, SIGKILL);
    wait_exit(pid_);
    pid_ = -1;
  }
  // Environment added for the next start() (e.g. MEMD_CRASH_AT).
  void set_env(std::vector<std::string> env) { env_ = std::move(env); }
  // Whether the daemon has exited (reaped): its exit code, or -1 if running.
  int exited() {
    int status = 0;
    if (pid_ <= 0 || waitpid(pid_, &status, WNOHANG) != pid_) return -1;
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  std::string socket() const { return dir_ + "/memd.sock"; }
  const std::string& dir() const { return dir_; }
  const std::string& shm_namespace() const { return ns_; }
  std::string log_path() const { return dir_ + "/memd.log"; }
  std::string log() const {
    std::ifstream in(log_path());
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  std::vector<std::string> extra_;
  std::vector<std::string> wrapper_;
  std::vector<std::string> env_;
  std::string dir_;
  std::string ns_;
  pid_t pid_ = -1;
};

}  // namespace memd::testing
