// memdctl's command line: global flags, one subcommand and its arguments.
// The subcommands and flags are described once, in tables, which the parser,
// the usage text, the man page and the shell completion all read
// (tools/manual/), so none of them can disagree with another.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace memd::memdctl {

enum class Command { kRegions, kStat, kClients, kCheck, kCompact, kDrain, kStats, kHealth, kRemove, kProfile, kReplay, kPprof, kFile };

struct CommandLine {
  std::string socket;  // empty: the default rule (region/socket_paths.h client_socket_path())
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

struct CommandSpec {
  Command command;
  const char* name;
  const char* alias;     // empty: none
  const char* operands;  // as the usage text shows them
  size_t min_args;
  size_t max_args;
  const char* summary;
};

struct FlagSpec {
  const char* name;
  const char* alias;   // empty: none
  const char* value;   // what the flag takes, as the usage text shows it; empty: nothing
  bool global;         // false: belongs to `command` only (its operands show it)
  Command command;
  const char* summary;  // usage text of a global flag (lines after the first indented)
  // Stores the flag's value (`flag` as typed, for messages).
  absl::Status (*apply)(CommandLine& cl, const std::string& flag, const std::string& value);
  int also = -1;  // a second command the flag belongs to (a Command), -1: none
};

std::span<const CommandSpec> command_specs();
std::span<const FlagSpec> flag_specs();

// What memdctl's exit status means (tools/memdctl/commands.h names them).
struct ExitStatusSpec {
  int code;
  const char* meaning;
};
std::span<const ExitStatusSpec> exit_status_specs();

// A usage error comes back as InvalidArgument with a one-line message; the
// caller prints it with usage().
absl::StatusOr<CommandLine> parse_command_line(int argc, const char* const* argv);

std::string usage();

}  // namespace memd::memdctl
