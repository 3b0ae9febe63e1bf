// memdctl's subcommands: each makes its call to memd and prints the answer,
// as text for people or, with --json, as the response message for scripts.
#pragma once

#include <grpcpp/grpcpp.h>

#include "tools/memdctl/command_line.h"
#include "tools/memdctl/daemon_calls.h"

namespace memd::memdctl {

// memdctl's exit status, as its usage text promises.
inline constexpr int kExitOk = 0;
inline constexpr int kExitCheckFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNotRunning = 3;
inline constexpr int kExitCallFailed = 4;
inline constexpr int kExitWriteFailed = 5;  // profile: the answer came, the file could not be written

struct Outcome {
  grpc::Status call;       // not ok: the call failed and nothing was printed
  int exit_code = kExitOk; // when it succeeded: kExitOk, kExitCheckFailed or kExitWriteFailed
};

// Runs the subcommand, printing its answer on stdout.
Outcome run_command(const CommandLine& command_line, DaemonCalls& calls);

}  // namespace memd::memdctl
