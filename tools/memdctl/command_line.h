// memdctl's command line: global flags, one subcommand and its arguments.
// The subcommands are described once, in a table, which both the parser and
// the usage text read, so the two cannot disagree.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace memd::memdctl {

enum class Command { kRegions, kStat, kClients, kCheck, kCompact, kDrain, kStats, kHealth, kRemove, kProfile, kReplay, kPprof, kFile };

struct CommandLine {
  std::string socket;  // empty: the default rule (region/options.h client_socket_path())
  bool json = false;
  std::chrono::milliseconds timeout{5000};
  bool help = false;  // --help: nothing else is looked at

  Command command = Command::kRegions;
  std::string command_name;        // as typed ("ls" or "regions"), for messages
  std::vector<std::string> args;   // the subcommand's positional arguments
  int32_t pid = 0;                 // drain PID, profile --pid PID (0: every client)
  std::string region;              // drain --region NAME
  std::string output;              // profile -o FILE ("-": stdout; empty: memd-REGION.pb.gz); pprof -o FILE (empty: SUMMARY.pb)
  std::string replay_methods;      // replay --method best,debug,... (empty: every method)
  std::string replay_allocators;   // replay --allocators glibc,... (empty: glibc, jemalloc, mimalloc)
  int replay_rounds = 3;           // replay --rounds N
  bool apply = false;              // file repair --apply
};

// A usage error comes back as InvalidArgument with a one-line message; the
// caller prints it with usage().
absl::StatusOr<CommandLine> parse_command_line(int argc, const char* const* argv);

std::string usage();

}  // namespace memd::memdctl
