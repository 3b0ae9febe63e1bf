#include "tools/memdctl/command_line.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace memd::memdctl {
namespace {


constexpr CommandSpec kCommands[] = {
    {Command::kRegions, "regions", "ls", "", 0, 0, "list the regions: use, backing, reservation, owner"},
    {Command::kStat, "stat", "", "REGION", 1, 1, "every statistic of one region"},
    {Command::kClients, "clients", "", "", 0, 0, "list the client processes and the leases they hold"},
    {Command::kCheck, "check", "", "[REGION]", 0, 1, "check the heap of one or every region (exit 1 if any fails)"},
    {Command::kCompact, "compact", "", "[REGION]", 0, 1, "give free pages of one or every region back to the system"},
    {Command::kDrain, "drain", "", "PID [--region NAME]", 1, 1,
     "ask a process (0: every process) to give back its spare blocks"},
    {Command::kStats, "stats", "", "", 0, 0, "the daemon's statistics"},
    {Command::kHealth, "health", "", "", 0, 0, "the daemon's grpc.health.v1 status (exit 1 unless SERVING)"},
    {Command::kRemove, "remove", "", "REGION", 1, 1, "delete a region no client has attached"},
    {Command::kProfile, "profile", "", "REGION [--pid PID] [-o FILE]", 1, 1,
     "a heap profile for go tool pprof (REGION \"(process)\": process heaps)"},
    {Command::kReplay, "replay", "", "TRACE [--method M,..] [--allocators A,..] [--rounds N]", 1, 1,
     "replay an allocation trace offline: time and space per method and malloc"},
    {Command::kPprof, "pprof", "", "SUMMARY [-o FILE]", 1, 1,
     "a profile method summary (VMPROFILE, vmprofile) as a pprof profile, offline"},
    {Command::kFile, "file", "", "info|check|roots|repair|copy|snapshot FILE [DEST] [--apply]", 2, 3,
     "with memd stopped, a region file: its facts, check, roots; repair shows what recovery would do "
     "(--apply does it); copy or snapshot (reflink only) to DEST"},
};

const CommandSpec* find_command(std::string_view word) {
  for (const CommandSpec& c : kCommands) {
    if (word == c.name || (*c.alias != '\0' && word == c.alias)) return &c;
  }
  return nullptr;
}

const char* find_command_name(Command command) {
  for (const CommandSpec& c : kCommands) {
    if (c.command == command) return c.name;
  }
  return "?";
}

absl::Status usage_error(const std::string& message) { return absl::InvalidArgumentError(message); }

// Seconds as a decimal number ("5", "0.25"), to whole milliseconds, at least one.
std::optional<std::chrono::milliseconds> parse_seconds(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  double seconds = std::strtod(text.c_str(), &end);
  // A day is far beyond any sensible deadline and keeps the conversion exact.
  if (errno != 0 || *end != '\0' || !std::isfinite(seconds) || seconds <= 0 || seconds > 86400) return std::nullopt;
  return std::chrono::milliseconds(std::max<int64_t>(1, std::llround(seconds * 1000)));
}

// A process id: decimal digits only, so that "12abc" or "-1" is not taken for a pid.
std::optional<int32_t> parse_pid(const std::string& text) {
  if (text.empty() || text.size() > 10) return std::nullopt;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  long long value = std::strtoll(text.c_str(), nullptr, 10);
  if (value > INT32_MAX) return std::nullopt;
  return static_cast<int32_t>(value);
}

// The flags, described once: the parser, the usage text and the manual read this table.

absl::Status set_help(CommandLine& cl, const std::string&, const std::string&) {
  cl.help = true;
  return absl::OkStatus();
}
absl::Status set_json(CommandLine& cl, const std::string&, const std::string&) {
  cl.json = true;
  return absl::OkStatus();
}
absl::Status set_socket(CommandLine& cl, const std::string& flag, const std::string& path) {
  if (path.empty()) return usage_error(absl::StrCat(flag, " needs a path"));
  cl.socket = path;
  return absl::OkStatus();
}
absl::Status set_timeout(CommandLine& cl, const std::string& flag, const std::string& text) {
  std::optional<std::chrono::milliseconds> timeout = parse_seconds(text);
  if (!timeout) return usage_error(absl::StrCat(flag, " takes seconds (a number above 0), not \"", text, "\""));
  cl.timeout = *timeout;
  return absl::OkStatus();
}
absl::Status set_region(CommandLine& cl, const std::string&, const std::string& name) {
  cl.region = name;
  return absl::OkStatus();
}
absl::Status set_pid(CommandLine& cl, const std::string& flag, const std::string& text) {
  std::optional<int32_t> pid = parse_pid(text);
  if (!pid) return usage_error(absl::StrCat(flag, ": \"", text, "\" is not a process id"));
  cl.pid = *pid;
  return absl::OkStatus();
}
absl::Status set_methods(CommandLine& cl, const std::string& flag, const std::string& list) {
  if (list.empty()) return usage_error(absl::StrCat(flag, " needs a method (best, debug, profile, region, pool, last)"));
  cl.replay_methods = cl.replay_methods.empty() ? list : absl::StrCat(cl.replay_methods, ",", list);
  return absl::OkStatus();
}
absl::Status set_allocators(CommandLine& cl, const std::string& flag, const std::string& list) {
  if (list.empty()) return usage_error(absl::StrCat(flag, " needs allocators (glibc, jemalloc, mimalloc, tcmalloc)"));
  cl.replay_allocators = list;
  return absl::OkStatus();
}
absl::Status set_rounds(CommandLine& cl, const std::string& flag, const std::string& text) {
  std::optional<int32_t> n = parse_pid(text);
  if (!n || *n < 1 || *n > 1000) return usage_error(absl::StrCat(flag, " takes a number from 1 to 1000, not \"", text, "\""));
  cl.replay_rounds = *n;
  return absl::OkStatus();
}
absl::Status set_apply(CommandLine& cl, const std::string&, const std::string&) {
  cl.apply = true;
  return absl::OkStatus();
}
absl::Status set_output(CommandLine& cl, const std::string& flag, const std::string& path) {
  if (path.empty()) return usage_error(absl::StrCat(flag, " needs a file name, or - for stdout"));
  cl.output = path;
  return absl::OkStatus();
}

constexpr FlagSpec kFlags[] = {
    {"--socket", "", "PATH", true, Command::kRegions,
     "the daemon's socket (default: $MEMD_SOCKET,\n"
     "else $XDG_RUNTIME_DIR/memd/memd.sock, else /run/memd/memd.sock\n"
     "for root, /tmp/memd-<uid>/memd.sock for others)",
     set_socket},
    {"--json", "", "", true, Command::kRegions,
     "print the answer as JSON, for scripts (file: info,\ncheck and roots)",
     set_json},
    {"--timeout", "", "SECONDS", true, Command::kRegions, "deadline of each call (default 5)", set_timeout},
    {"--help", "-h", "", true, Command::kRegions, "this text", set_help},
    {"--region", "", "NAME", false, Command::kDrain, "", set_region},
    {"--pid", "", "PID", false, Command::kProfile, "", set_pid},
    {"--output", "-o", "FILE", false, Command::kProfile, "", set_output, static_cast<int>(Command::kPprof)},
    {"--method", "", "M,..", false, Command::kReplay, "", set_methods},
    {"--allocators", "", "A,..", false, Command::kReplay, "", set_allocators},
    {"--rounds", "", "N", false, Command::kReplay, "", set_rounds},
    {"--apply", "", "", false, Command::kFile, "", set_apply},
};

const FlagSpec* find_flag(std::string_view word) {
  for (const FlagSpec& f : kFlags) {
    if (word == f.name || (*f.alias != '\0' && word == f.alias)) return &f;
  }
  return nullptr;
}

}  // namespace

std::span<const CommandSpec> command_specs() { return kCommands; }
std::span<const FlagSpec> flag_specs() { return kFlags; }

std::span<const ExitStatusSpec> exit_status_specs() {
  static constexpr ExitStatusSpec kStatuses[] = {
      {0, "done"},
      {1, "a check failed"},
      {2, "usage error"},
      {3, "memd cannot be reached (not running)"},
      {4, "the daemon refused or failed the call"},
      {5, "the profile could not be written"},
  };
  return kStatuses;
}

absl::StatusOr<CommandLine> parse_command_line(int argc, const char* const* argv) {
  CommandLine cl;
  std::vector<std::string> words;  // the subcommand and its operands
  std::vector<std::pair<const FlagSpec*, std::string>> command_flags;  // checked once the command is known
  bool options_ended = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (options_ended || arg.size() < 2 || arg[0] != '-') {
      words.push_back(std::move(arg));
      continue;
    }
    if (arg == "--") {
      options_ended = true;
      continue;
    }
    // Flags with a value take it as the next word or after '='.
    std::string flag = arg, value;
    bool has_inline_value = false;
    if (size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_inline_value = true;
    }
    const FlagSpec* spec = find_flag(flag);
    if (spec == nullptr || (*spec->value == '\0' && has_inline_value)) {
      return usage_error(absl::StrCat("unknown option ", arg));
    }
    if (*spec->value != '\0' && !has_inline_value) {
      if (i + 1 >= argc) return usage_error(absl::StrCat(flag, " needs a value"));
      value = argv[++i];
    }
    if (absl::Status s = spec->apply(cl, flag, value); !s.ok()) return s;
    if (cl.help) return cl;  // nothing else is looked at
    if (!spec->global) command_flags.push_back({spec, flag});
  }

  if (words.empty()) return usage_error("no command given");
  const CommandSpec* spec = find_command(words[0]);
  if (spec == nullptr) return usage_error(absl::StrCat("unknown command \"", words[0], "\""));
  cl.command = spec->command;
  cl.command_name = words[0];
  cl.args.assign(words.begin() + 1, words.end());
  if (cl.args.size() < spec->min_args) {
    return usage_error(absl::StrCat(cl.command_name, ": expected ", spec->operands));
  }
  if (cl.args.size() > spec->max_args) {
    return usage_error(absl::StrCat(cl.command_name, ": unexpected argument \"", cl.args[spec->max_args], "\""));
  }
  for (const auto& [flag, typed] : command_flags) {
    if (flag->command != cl.command && flag->also != static_cast<int>(cl.command)) {
      return usage_error(absl::StrCat(typed, " belongs to ", find_command_name(flag->command), ", not ",
                                      cl.command_name));
    }
  }
  if (cl.command == Command::kDrain) {
    std::optional<int32_t> pid = parse_pid(cl.args[0]);
    if (!pid) return usage_error(absl::StrCat("drain: \"", cl.args[0], "\" is not a process id"));
    cl.pid = *pid;
  }
  return cl;
}

std::string usage() {
  std::string text =
      "usage: memdctl [--socket PATH] [--json] [--timeout SECONDS] COMMAND [ARGS]\n"
      "\n"
      "Looks at and manages a running memd through its socket.\n"
      "\n"
      "commands:\n";
  for (const CommandSpec& c : kCommands) {
    std::string synopsis = absl::StrCat(c.name, *c.operands == '\0' ? "" : " ", c.operands);
    if (*c.alias != '\0') absl::StrAppend(&synopsis, " (", c.alias, ")");
    // A synopsis too long for the column puts its summary on the next line.
    const std::string gap = synopsis.size() < 28 ? std::string(28 - synopsis.size(), ' ') : "\n" + std::string(30, ' ');
    absl::StrAppend(&text, "  ", synopsis, gap, c.summary, "\n");
  }
  absl::StrAppend(&text, "\noptions:\n");
  for (const FlagSpec& f : kFlags) {
    if (!f.global) continue;
    std::string synopsis = *f.alias != '\0' ? absl::StrCat(f.alias, ", ", f.name) : std::string(f.name);
    if (*f.value != '\0') absl::StrAppend(&synopsis, " ", f.value);
    std::string summary = f.summary;
    for (size_t at = summary.find('\n'); at != std::string::npos; at = summary.find('\n', at + 1)) {
      summary.insert(at + 1, std::string(30, ' '));
    }
    absl::StrAppend(&text, "  ", synopsis, std::string(synopsis.size() < 28 ? 28 - synopsis.size() : 1, ' '), summary,
                    "\n");
  }
  absl::StrAppend(&text, "\nexit status:");
  size_t column = 12;
  for (const ExitStatusSpec& e : exit_status_specs()) {
    std::string item = absl::StrCat(" ", e.code, " ", e.meaning, e.code == exit_status_specs().back().code ? "" : ",");
    if (column + item.size() > 96) {
      absl::StrAppend(&text, "\n");
      item.erase(0, 1);
      column = 0;
    }
    absl::StrAppend(&text, item);
    column += item.size();
  }
  absl::StrAppend(&text, "\n");
  return text;
}

}  // namespace memd::memdctl
