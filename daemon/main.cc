// memd: serves shared and persistent memory regions to libmemd clients.
// `memd --help` for the settings; SIGTERM or SIGINT stop it cleanly.
#include <signal.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "daemon/config.h"
#include "daemon/daemon.h"
#include "daemon/log.h"
#include "daemon/systemd.h"
#include "daemon/version.h"

namespace {

memd::daemon::LogLevel level_of(const std::string& s) {
  if (s == "debug") return memd::daemon::LogLevel::kDebug;
  if (s == "warning") return memd::daemon::LogLevel::kWarning;
  if (s == "error") return memd::daemon::LogLevel::kError;
  return memd::daemon::LogLevel::kInfo;
}

// Each client connection takes two descriptors (gRPC's and the daemon's
// watch of it), so the default soft limit of 1024 would run out long before
// max-sessions: take what the hard limit allows.
void raise_descriptor_limit() {
  rlimit l{};
  if (getrlimit(RLIMIT_NOFILE, &l) != 0 || l.rlim_cur >= l.rlim_max) return;
  l.rlim_cur = l.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &l) != 0) {
    memd::daemon::log_warning("cannot raise the descriptor limit to ", l.rlim_max, ": ", std::strerror(errno));
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace memd::daemon;
  absl::StatusOr<CommandLine> cl = parse_command_line(argc, argv);
  if (!cl.ok()) {
    std::fprintf(stderr, "memd: %s\n", std::string(cl.status().message()).c_str());
    return 2;
  }
  if (cl->help) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  if (cl->version) {
    std::printf("memd %s (protocol %s)\n", kVersion, kProtocol);
    return 0;
  }
  if (cl->print_config) {
    std::fputs(describe(cl->config).c_str(), stdout);
    return 0;
  }
  set_log_level(level_of(cl->config.log_level));
  raise_descriptor_limit();

  // Signals are taken by this thread with sigwait: block them before any
  // thread starts, so that every thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // Before any thread starts: it takes LISTEN_* out of the environment.
  absl::StatusOr<int> activated = take_activated_socket();
  if (!activated.ok()) {
    log_error("cannot start: ", activated.status().message());
    return 1;
  }
  absl::StatusOr<std::unique_ptr<Daemon>> d = Daemon::start(cl->config, *activated);
  if (!d.ok()) {
    log_error("cannot start: ", d.status().message());
    return 1;
  }
  for (;;) {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (sig == SIGHUP) {
      log_info("SIGHUP: nothing to reload (restart memd to change settings)");
      continue;
    }
    log_info(sig == SIGTERM ? "SIGTERM" : "SIGINT", " received");
    break;
  }
  (*d)->stop();
  return 0;
}
