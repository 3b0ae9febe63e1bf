// memdctl: looks at and manages a running memd. `memdctl --help` lists the
// commands; the exit status tells scripts what happened (see usage()).
#include <sys/un.h>

#include <cstdio>
#include <string>

#include "proto/grpc_status_name.h"
#include "region/options.h"
#include "region/socket_paths.h"
#include "tools/memdctl/command_line.h"
#include "tools/memdctl/commands.h"
#include "tools/memdctl/daemon_calls.h"
#include "tools/memdctl/file_commands.h"
#include "tools/memdctl/replay_command.h"
#include "tools/memdctl/pprof_command.h"

namespace {

using namespace memd::memdctl;

constexpr const char* kHowToStart = "start it with 'make run' or 'memd', or pass --socket";

// Says why the daemon cannot be reached; kExitOk if it can.
int report_unreachable(const std::string& socket) {
  switch (probe_socket(socket)) {
    case SocketState::kAnswers:
      return kExitOk;
    case SocketState::kMissing:
      std::fprintf(stderr, "memdctl: memd is not running (no socket at %s); %s\n", socket.c_str(), kHowToStart);
      return kExitNotRunning;
    case SocketState::kNotListening:
      std::fprintf(stderr, "memdctl: memd is not running (nothing answers at %s); %s\n", socket.c_str(), kHowToStart);
      return kExitNotRunning;
    case SocketState::kNoAccess:
      std::fprintf(stderr, "memdctl: cannot connect to memd at %s: permission denied by the socket's mode\n",
                   socket.c_str());
      return kExitNotRunning;
    case SocketState::kPathTooLong:
      std::fprintf(stderr, "memdctl: cannot connect to memd at %s: a socket path holds at most %zu bytes\n",
                   socket.c_str(), sizeof(sockaddr_un::sun_path) - 1);
      return kExitNotRunning;
  }
  return kExitNotRunning;
}

}  // namespace

int main(int argc, char** argv) {
  absl::StatusOr<CommandLine> command_line = parse_command_line(argc, argv);
  if (!command_line.ok()) {
    std::fprintf(stderr, "memdctl: %s\n\n%s", std::string(command_line.status().message()).c_str(), usage().c_str());
    return kExitUsage;
  }
  if (command_line->help) {
    std::fputs(usage().c_str(), stdout);
    return kExitOk;
  }

  if (command_line->command == Command::kReplay) return run_replay(*command_line);
  if (command_line->command == Command::kPprof) return run_pprof(*command_line);
  if (command_line->command == Command::kFile) return run_file(*command_line);

  const std::string socket = command_line->socket.empty() ? memd::region::client_socket_path() : command_line->socket;
  if (int code = report_unreachable(socket); code != kExitOk) return code;

  DaemonCalls calls(socket, command_line->timeout);
  Outcome outcome = run_command(*command_line, calls);
  if (outcome.call.ok()) return outcome.exit_code;

  const grpc::Status& failed = outcome.call;
  // A daemon that stopped between the probe and the call is not running,
  // rather than failing the call.
  if (failed.error_code() == grpc::StatusCode::UNAVAILABLE) {
    if (int code = report_unreachable(socket); code != kExitOk) return code;
  }
  std::string hint;
  if (failed.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%g", static_cast<double>(command_line->timeout.count()) / 1000);
    hint = std::string(" (memd did not answer within ") + seconds + " s; a busy daemon may need a longer --timeout)";
  }
  std::fprintf(stderr, "memdctl: %s: %s: %s%s\n", command_line->command_name.c_str(),
               memd::grpc_status_name(failed.error_code()).c_str(), failed.error_message().c_str(), hint.c_str());
  return kExitCallFailed;
}
