// A memd started for one benchmark run: the daemon binary as a child
// process with its own socket, data directory and shm namespace under a
// directory of its own, stopped (SIGTERM, then waited for) and removed at
// the end. The parent starting it never touches gRPC itself.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace shb {

class MemdProcess {
 public:
  // Starts `binary` with everything under `dir` (created; removed by stop())
  // and shm objects named memd.<shm_namespace>.<region>. Empty on success,
  // else what went wrong.
  std::string start(const std::string& binary, const std::string& dir, const std::string& shm_namespace) {
    dir_ = dir;
    if (socket().size() >= sizeof(sockaddr_un::sun_path)) return "socket path too long for AF_UNIX: " + socket();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);  // a leftover of a killed run with the same pid
    if (!std::filesystem::create_directories(dir_, ec)) return "cannot create " + dir_ + ": " + ec.message();
    std::vector<std::string> argv = {binary, "--socket", socket(), "--data-dir", dir_ + "/data",
                                     "--shm-namespace", shm_namespace};  // otherwise memd's defaults
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    std::string log = dir_ + "/memd.log";
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    int err = posix_spawn(&pid_, binary.c_str(), &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (err != 0) {
      pid_ = -1;
      return "cannot start " + binary + ": " + std::strerror(err);
    }
    // It is up when its socket accepts a connection.
    for (int i = 0; i < 1000; ++i) {
      if (answers()) return "";
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return "memd exited at start (see " + log + ")";
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return "memd did not open its socket within 10 s (see " + log + ")";
  }

  // SIGTERM (a clean shutdown), then removes its directory.
  void stop() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      pid_ = -1;
    }
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
      dir_.clear();
    }
  }

  std::string socket() const { return dir_ + "/memd.sock"; }

 private:
  bool answers() const {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::string path = socket();
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(fd);
    return ok;
  }

  std::string dir_;
  pid_t pid_ = -1;
};

}  // namespace shb
