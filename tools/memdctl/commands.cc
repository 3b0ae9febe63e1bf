#include "tools/memdctl/commands.h"

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/struct.pb.h"
#include "heap/units.h"
#include "tools/memdctl/output.h"

namespace memd::memdctl {
namespace {

using Align = Table::Align;

// The lease slot the daemon reports for a read-only attachment, which holds
// no lease.
constexpr uint32_t kReadOnlyLeaseSlot = UINT32_MAX;

// Prints a successful answer: the message as JSON, or the text people read.
Outcome print_answer(const CommandLine& command_line, const google::protobuf::Message& response,
                     const std::function<std::string()>& text) {
  if (command_line.json) {
    absl::StatusOr<std::string> json = to_json(response);
    if (!json.ok()) return {grpc::Status(grpc::StatusCode::INTERNAL, std::string(json.status().message()))};
    std::fputs(json->c_str(), stdout);
    std::fputc('\n', stdout);
  } else {
    std::fputs(text().c_str(), stdout);
  }
  return {};
}

// The region named on the command line, or "" for every region.
std::string optional_region(const CommandLine& command_line) {
  return command_line.args.empty() ? "" : command_line.args[0];
}

Outcome regions_command(const CommandLine& command_line, DaemonCalls& calls) {
  v1::ListRegionsResponse response;
  if (grpc::Status s = calls.list_regions(&response); !s.ok()) return {s};
  return print_answer(command_line, response, [&] {
    Table table({{"NAME"},
                 {"DISCIPLINE"},
                 {"METHOD"},
                 {"CLIENTS", Align::kRight},
                 {"IN USE", Align::kRight},
                 {"BACKING", Align::kRight},
                 {"OBJECTS", Align::kRight},
                 {"RESERVED", Align::kRight},
                 {"OWNER", Align::kRight},
                 {"MODE"},
                 {"STATE"}});
    for (const v1::RegionInfo& r : response.regions()) {
      table.add_row({r.name(), enum_label(*v1::Discipline_descriptor(), r.discipline()),
                     enum_label(*v1::Method_descriptor(), r.method()), absl::StrCat(r.clients()),
                     human_bytes(r.pages_in_use() * heap::kPageSize), human_bytes(r.backing_bytes()),
                     absl::StrCat(r.objects()), human_bytes(r.max_bytes()), absl::StrCat(r.owner_uid()),
                     octal_mode(r.mode()), r.damage().empty() ? "served" : "damaged: " + r.damage()});
    }
    return table.render();
  });
}

Outcome stat_command(const CommandLine& command_line, DaemonCalls& calls) {
  v1::RegionInfo response;
  if (grpc::Status s = calls.stat_region(command_line.args[0], &response); !s.ok()) return {s};
  return print_answer(command_line, response, [&] { return describe_fields(response); });
}

std::string lease_summary(const v1::ClientLeaseInfo& lease) {
  if (lease.lease_slot() == kReadOnlyLeaseSlot) return absl::StrCat(lease.region(), ":read-only");
  return absl::StrCat(lease.region(), ":", lease.lease_slot(), " blocks=", lease.blocks());
}

Outcome clients_command(const CommandLine& command_line, DaemonCalls& calls) {
  v1::ListClientsResponse response;
  if (grpc::Status s = calls.list_clients(&response); !s.ok()) return {s};
  return print_answer(command_line, response, [&] {
    Table table({{"SESSION", Align::kRight},
                 {"PID", Align::kRight},
                 {"UID", Align::kRight},
                 {"PROGRAM"},
                 {"RPCS", Align::kRight},
                 {"REGIONS"}});
    for (const v1::ClientInfo& c : response.clients()) {
      std::vector<std::string> leases;
      for (const v1::ClientLeaseInfo& l : c.leases()) leases.push_back(lease_summary(l));
      table.add_row({absl::StrCat(c.session()), absl::StrCat(c.pid()), absl::StrCat(c.uid()),
                     c.program().empty() ? "-" : c.program(), absl::StrCat(c.rpcs()),
                     leases.empty() ? "-" : absl::StrJoin(leases, ", ")});
    }
    return table.render();
  });
}

Outcome check_command(const CommandLine& command_line, DaemonCalls& calls) {
  v1::CheckResponse response;
  if (grpc::Status s = calls.check(optional_region(command_line), &response); !s.ok()) return {s};
  bool all_ok = true;
  for (const v1::CheckResult& r : response.results()) all_ok = all_ok && r.ok();
  Outcome outcome = print_answer(command_line, response, [&] {
    std::string text;
    for (const v1::CheckResult& r : response.results()) {
      if (r.ok()) {
        absl::StrAppend(&text, r.region(), " ok");
        if (r.blocks_skipped() > 0) {
          absl::StrAppend(&text, " (", r.blocks_skipped(), " blocks owned by running threads: descriptors only)");
        }
        absl::StrAppend(&text, "\n");
      } else {
        absl::StrAppend(&text, r.region(), " FAILED", r.message().empty() ? "" : ": ", r.message(), "\n");
      }
    }
    return text;
  });
  if (outcome.call.ok() && !all_ok) outcome.exit_code = kExitCheckFailed;
  return outcome;
}

Outcome compact_command(const CommandLine& command_line, DaemonCalls& calls) {
  v1::CompactResponse response;
  if (grpc::Status s = calls.compact(optional_region(command_line), &response); !s.ok()) return {s};
  return print_answer(command_line, response, [&] {
    return absl::StrCat("backing: ", human_bytes(response.backing_bytes_before()), " -> ",
                        human_bytes(response.backing_bytes_after()), " (", response.backing_bytes_before(), " -> ",
                        response.backing_bytes_after(), " bytes)\n");
  });
}

Outcome drain_command(const CommandLine& command_line, DaemonCalls& calls) {
  v1::DrainResponse response;
  if (grpc::Status s = calls.drain(command_line.pid, command_line.region, &response); !s.ok()) return {s};
  return print_answer(command_line, response, [&] {
    // The daemon only asks: each client gives its blocks back when it reads
    // the command from its session stream.
    return absl::StrCat("asked ", response.sessions(), response.sessions() == 1 ? " session" : " sessions",
                        " to give back spare blocks\n");
  });
}

Outcome stats_command(const CommandLine& command_line, DaemonCalls& calls) {
  v1::StatsResponse response;
  if (grpc::Status s = calls.stats(&response); !s.ok()) return {s};
  return print_answer(command_line, response, [&] { return describe_fields(response); });
}

Outcome health_command(const CommandLine& command_line, DaemonCalls& calls) {
  grpc::health::v1::HealthCheckResponse response;
  if (grpc::Status s = calls.health(&response); !s.ok()) return {s};
  Outcome outcome = print_answer(command_line, response, [&] {
    return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status()) + "\n";
  });
  if (outcome.call.ok() && response.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    outcome.exit_code = kExitCheckFailed;
  }
  return outcome;
}

Outcome remove_command(const CommandLine& command_line, DaemonCalls& calls) {
  v1::RemoveRegionResponse response;
  if (grpc::Status s = calls.remove_region(command_line.args[0], &response); !s.ok()) return {s};
  return print_answer(command_line, response,
                      [&] { return absl::StrCat("removed region ", command_line.args[0], "\n"); });
}

// memd-REGION.pb.gz, without the characters a file name had better not
// carry: "(process)" gives memd-process.pb.gz.
std::string default_profile_file(const std::string& region) {
  std::string name = "memd-";
  for (char c : region) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') {
      name += c;
    } else if (c != '(' && c != ')') {
      name += '_';
    }
  }
  return name + ".pb.gz";
}

// Writes all of `bytes` to `path` ("-": stdout); why not, if it cannot.
std::optional<std::string> write_all(const std::string& path, const std::string& bytes) {
  const bool to_stdout = path == "-";
  FILE* file = to_stdout ? stdout : std::fopen(path.c_str(), "wb");
  if (file == nullptr) return std::strerror(errno);
  errno = 0;
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size();
  ok = (to_stdout ? std::fflush(file) : std::fclose(file)) == 0 && ok;
  if (ok) return std::nullopt;
  return errno != 0 ? std::strerror(errno) : "short write";
}

// The profile goes to its file; what was written goes to stderr, or as JSON
// to stdout (stderr when the profile itself is on stdout).
Outcome profile_command(const CommandLine& command_line, DaemonCalls& calls) {
  const std::string& region = command_line.args[0];
  v1::ProfileResponse response;
  if (grpc::Status s = calls.profile(region, command_line.pid, &response); !s.ok()) return {s};
  const std::string file = command_line.output.empty() ? default_profile_file(region) : command_line.output;
  if (std::optional<std::string> error = write_all(file, response.profile())) {
    std::fprintf(stderr, "memdctl: profile: cannot write %s: %s\n", file.c_str(), error->c_str());
    return {grpc::Status::OK, kExitWriteFailed};
  }
  const bool to_stdout = file == "-";
  if (command_line.json) {
    google::protobuf::Struct summary;
    auto& fields = *summary.mutable_fields();
    fields["region"].set_string_value(region);
    fields["pid"].set_number_value(command_line.pid);
    fields["samples"].set_number_value(static_cast<double>(response.samples()));
    fields["live_samples"].set_number_value(static_cast<double>(response.live_samples()));
    fields["file"].set_string_value(file);
    fields["bytes"].set_number_value(static_cast<double>(response.profile().size()));
    absl::StatusOr<std::string> json = to_json(summary);
    if (!json.ok()) return {grpc::Status(grpc::StatusCode::INTERNAL, std::string(json.status().message()))};
    std::fprintf(to_stdout ? stderr : stdout, "%s\n", json->c_str());
  } else {
    std::fprintf(stderr, "profile of %s: %llu samples (%llu live), %s written to %s\n", region.c_str(),
                 static_cast<unsigned long long>(response.samples()),
                 static_cast<unsigned long long>(response.live_samples()),
                 human_bytes(response.profile().size()).c_str(), to_stdout ? "stdout" : file.c_str());
  }
  return {};
}

}  // namespace

Outcome run_command(const CommandLine& command_line, DaemonCalls& calls) {
  switch (command_line.command) {
    case Command::kRegions: return regions_command(command_line, calls);
    case Command::kStat: return stat_command(command_line, calls);
    case Command::kClients: return clients_command(command_line, calls);
    case Command::kCheck: return check_command(command_line, calls);
    case Command::kCompact: return compact_command(command_line, calls);
    case Command::kDrain: return drain_command(command_line, calls);
    case Command::kStats: return stats_command(command_line, calls);
    case Command::kHealth: return health_command(command_line, calls);
    case Command::kRemove: return remove_command(command_line, calls);
    case Command::kProfile: return profile_command(command_line, calls);
    case Command::kReplay:  // offline: main runs them without a daemon
    case Command::kPprof:
    case Command::kFile:
      return {grpc::Status(grpc::StatusCode::INTERNAL, "an offline command asks no daemon")};
  }
  return {grpc::Status(grpc::StatusCode::INTERNAL, "unknown command")};
}

}  // namespace memd::memdctl
