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

struct CommandSpec {
  Command command;
  const char* name;
  const char* alias;     // empty: none
  const char* operands;  // as the usage text shows them
  size_t min_args;
  size_t max_args;
  const char* summary;
};

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
};

const CommandSpec* find_command(std::string_view word) {
  for (const CommandSpec& c : kCommands) {
    if (word == c.name || (*c.alias != '\0' && word == c.alias)) return &c;
  }
  return nullptr;
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

}  // namespace

absl::StatusOr<CommandLine> parse_command_line(int argc, const char* const* argv) {
  CommandLine cl;
  std::vector<std::string> words;  // the subcommand and its operands
  bool region_given = false, pid_given = false, output_given = false;
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
    auto take_value = [&]() -> absl::StatusOr<std::string> {
      if (has_inline_value) return value;
      if (i + 1 >= argc) return usage_error(absl::StrCat(flag, " needs a value"));
      return std::string(argv[++i]);
    };
    if (flag == "--help" || flag == "-h") {
      cl.help = true;
      return cl;
    } else if (flag == "--json" && !has_inline_value) {
      cl.json = true;
    } else if (flag == "--socket") {
      absl::StatusOr<std::string> path = take_value();
      if (!path.ok()) return path.status();
      if (path->empty()) return usage_error("--socket needs a path");
      cl.socket = *path;
    } else if (flag == "--timeout") {
      absl::StatusOr<std::string> text = take_value();
      if (!text.ok()) return text.status();
      std::optional<std::chrono::milliseconds> timeout = parse_seconds(*text);
      if (!timeout) return usage_error(absl::StrCat("--timeout takes seconds (a number above 0), not \"", *text, "\""));
      cl.timeout = *timeout;
    } else if (flag == "--region") {
      absl::StatusOr<std::string> name = take_value();
      if (!name.ok()) return name.status();
      cl.region = *name;
      region_given = true;
    } else if (flag == "--pid") {
      absl::StatusOr<std::string> text = take_value();
      if (!text.ok()) return text.status();
      std::optional<int32_t> pid = parse_pid(*text);
      if (!pid) return usage_error(absl::StrCat("--pid: \"", *text, "\" is not a process id"));
      cl.pid = *pid;
      pid_given = true;
    } else if (flag == "-o" || flag == "--output") {
      absl::StatusOr<std::string> path = take_value();
      if (!path.ok()) return path.status();
      if (path->empty()) return usage_error(absl::StrCat(flag, " needs a file name, or - for stdout"));
      cl.output = *path;
      output_given = true;
    } else {
      return usage_error(absl::StrCat("unknown option ", arg));
    }
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
  if (region_given && cl.command != Command::kDrain) {
    return usage_error(absl::StrCat("--region belongs to drain, not ", cl.command_name));
  }
  if ((pid_given || output_given) && cl.command != Command::kProfile) {
    return usage_error(absl::StrCat(pid_given ? "--pid" : "-o", " belongs to profile, not ", cl.command_name));
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
  absl::StrAppend(&text,
                  "\n"
                  "options:\n"
                  "  --socket PATH               the daemon's socket (default: $MEMD_SOCKET,\n"
                  "                              else $XDG_RUNTIME_DIR/memd/memd.sock, else /run/memd/memd.sock\n"
                  "                              for root, /tmp/memd-<uid>/memd.sock for others)\n"
                  "  --json                      print the daemon's answer as JSON, for scripts\n"
                  "  --timeout SECONDS           deadline of each call (default 5)\n"
                  "  -h, --help                  this text\n"
                  "\n"
                  "exit status: 0 done, 1 a check failed, 2 usage error, 3 memd cannot be reached (not running),\n"
                  "4 the daemon refused or failed the call, 5 the profile could not be written\n");
  return text;
}

}  // namespace memd::memdctl
