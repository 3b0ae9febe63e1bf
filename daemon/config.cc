#include "daemon/config.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "region/options.h"
#include "region/socket_paths.h"

namespace memd::daemon {
namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

DaemonConfig embedded_defaults() {
  DaemonConfig c;
  c.socket_path = region::daemon_socket_path();  // libmemd's default too
  c.data_dir = env_or("MEMD_DATA_DIR", "./run/data");
  return c;
}

struct Key {
  const char* name;
  const char* help;
  std::function<bool(DaemonConfig&, std::string_view)> set;
  std::function<std::string(const DaemonConfig&)> get;
};

template <class T>
bool parse_uint(std::string_view text, T* out, int base = 10) {
  char* end = nullptr;
  std::string s(text);
  errno = 0;
  unsigned long long v = std::strtoull(s.c_str(), &end, base);
  if (s.empty() || *end != '\0' || errno != 0 || s[0] == '-' || v > std::numeric_limits<T>::max()) return false;
  *out = static_cast<T>(v);
  return true;
}

const std::vector<Key>& keys() {
  static const std::vector<Key> k = {
      {"socket", "Unix socket clients connect to",
       [](DaemonConfig& c, std::string_view v) { c.socket_path = std::string(v); return !v.empty(); },
       [](const DaemonConfig& c) { return c.socket_path; }},
      {"socket-mode", "permission bits of the socket (octal)",
       [](DaemonConfig& c, std::string_view v) { return parse_uint(v, &c.socket_mode, 8) && c.socket_mode <= 0777; },
       [](const DaemonConfig& c) { return absl::StrCat("0", absl::Dec(c.socket_mode / 64), c.socket_mode / 8 % 8, c.socket_mode % 8); }},
      {"data-dir", "directory of region files and the region catalog",
       [](DaemonConfig& c, std::string_view v) { c.data_dir = std::string(v); return !v.empty(); },
       [](const DaemonConfig& c) { return c.data_dir; }},
      {"shm-namespace", "prefix of this daemon's shm objects (at most 49 letters, digits, '_', '-')",
       [](DaemonConfig& c, std::string_view v) {
         // /dev/shm/memd.<namespace>.<name>: with a name of 200, one file name.
         if (v.size() > 49) return false;
         for (char ch : v) {
           if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '-') return false;
         }
         c.shm_namespace = std::string(v);
         return true;
       },
       [](const DaemonConfig& c) { return c.shm_namespace; }},
      {"metrics-address", "host:port of the Prometheus endpoint (telemetry)",
       [](DaemonConfig& c, std::string_view v) { c.metrics_address = std::string(v); return true; },
       [](const DaemonConfig& c) { return c.metrics_address; }},
      {"log-level", "debug, info, warning or error",
       [](DaemonConfig& c, std::string_view v) {
         if (v != "debug" && v != "info" && v != "warning" && v != "error") return false;
         c.log_level = std::string(v);
         return true;
       },
       [](const DaemonConfig& c) { return c.log_level; }},
      {"region-bytes", "default reservation of a new region (e.g. 1G)",
       [](DaemonConfig& c, std::string_view v) { return region::parse_bytes(v, &c.region_bytes) && c.region_bytes > 0; },
       [](const DaemonConfig& c) { return std::to_string(c.region_bytes); }},
      {"region-clients", "default processes attached to a region at once",
       [](DaemonConfig& c, std::string_view v) { return parse_uint(v, &c.region_clients) && c.region_clients > 0; },
       [](const DaemonConfig& c) { return std::to_string(c.region_clients); }},
      {"region-threads", "default thread heaps of a region (all processes)",
       [](DaemonConfig& c, std::string_view v) { return parse_uint(v, &c.region_threads) && c.region_threads > 0; },
       [](const DaemonConfig& c) { return std::to_string(c.region_threads); }},
      {"max-region-bytes", "the largest reservation a client may ask for",
       [](DaemonConfig& c, std::string_view v) { return region::parse_bytes(v, &c.max_region_bytes) && c.max_region_bytes > 0; },
       [](const DaemonConfig& c) { return std::to_string(c.max_region_bytes); }},
      {"max-regions", "regions the daemon serves at once",
       [](DaemonConfig& c, std::string_view v) { return parse_uint(v, &c.max_regions) && c.max_regions > 0; },
       [](const DaemonConfig& c) { return std::to_string(c.max_regions); }},
      {"client-block-quota", "blocks one client may hold in one region (0: no limit)",
       [](DaemonConfig& c, std::string_view v) { return parse_uint(v, &c.client_block_quota); },
       [](const DaemonConfig& c) { return std::to_string(c.client_block_quota); }},
      {"max-sessions", "client processes connected at once",
       [](DaemonConfig& c, std::string_view v) { return parse_uint(v, &c.max_sessions) && c.max_sessions > 0; },
       [](const DaemonConfig& c) { return std::to_string(c.max_sessions); }},
      {"max-sessions-per-uid", "sessions one user may have open (root: no limit)",
       [](DaemonConfig& c, std::string_view v) { return parse_uint(v, &c.max_sessions_per_uid) && c.max_sessions_per_uid > 0; },
       [](const DaemonConfig& c) { return std::to_string(c.max_sessions_per_uid); }},
      {"max-sessions-per-process", "sessions one process may have open (root: no limit)",
       [](DaemonConfig& c, std::string_view v) {
         return parse_uint(v, &c.max_sessions_per_process) && c.max_sessions_per_process > 0;
       },
       [](const DaemonConfig& c) { return std::to_string(c.max_sessions_per_process); }},
      {"max-connections-per-uid", "connections one user may have open; more are closed at once (root: no limit)",
       [](DaemonConfig& c, std::string_view v) {
         return parse_uint(v, &c.max_connections_per_uid) && c.max_connections_per_uid > 0;
       },
       [](const DaemonConfig& c) { return std::to_string(c.max_connections_per_uid); }},
      {"max-regions-per-uid", "regions one user may own (root: no limit)",
       [](DaemonConfig& c, std::string_view v) { return parse_uint(v, &c.max_regions_per_uid) && c.max_regions_per_uid > 0; },
       [](const DaemonConfig& c) { return std::to_string(c.max_regions_per_uid); }},
      {"max-bytes-per-uid", "bytes of region objects one user may own, as they grow (e.g. 64G; 0: no limit; root: no limit)",
       [](DaemonConfig& c, std::string_view v) { return region::parse_bytes(v, &c.max_bytes_per_uid); },
       [](const DaemonConfig& c) { return std::to_string(c.max_bytes_per_uid); }},
      {"handshake-timeout", "seconds a new connection has to make its first call before it is closed",
       [](DaemonConfig& c, std::string_view v) { return parse_uint(v, &c.handshake_timeout_s) && c.handshake_timeout_s > 0; },
       [](const DaemonConfig& c) { return std::to_string(c.handshake_timeout_s); }},
      {"idle-timeout", "seconds a connection with no call in progress may go without one before it is closed (0: never)",
       [](DaemonConfig& c, std::string_view v) { return parse_uint(v, &c.idle_timeout_s); },
       [](const DaemonConfig& c) { return std::to_string(c.idle_timeout_s); }},
      {"drain-timeout", "seconds calls in progress get to finish at shutdown",
       [](DaemonConfig& c, std::string_view v) { return parse_uint(v, &c.drain_timeout_s); },
       [](const DaemonConfig& c) { return std::to_string(c.drain_timeout_s); }},
      {"telemetry-bytes-per-session", "bytes of telemetry samples and symbols kept per client session (e.g. 8M)",
       [](DaemonConfig& c, std::string_view v) {
         return region::parse_bytes(v, &c.telemetry_bytes_per_session) && c.telemetry_bytes_per_session > 0;
       },
       [](const DaemonConfig& c) { return std::to_string(c.telemetry_bytes_per_session); }},
      {"telemetry-bytes-per-uid", "bytes of telemetry samples and symbols kept for all sessions of one user (e.g. 64M)",
       [](DaemonConfig& c, std::string_view v) {
         return region::parse_bytes(v, &c.telemetry_bytes_per_uid) && c.telemetry_bytes_per_uid > 0;
       },
       [](const DaemonConfig& c) { return std::to_string(c.telemetry_bytes_per_uid); }},
      {"checkpoint-on-exit", "make file regions durable at shutdown (true/false)",
       [](DaemonConfig& c, std::string_view v) {
         if (v != "true" && v != "false") return false;
         c.checkpoint_on_exit = v == "true";
         return true;
       },
       [](const DaemonConfig& c) { return std::string(c.checkpoint_on_exit ? "true" : "false"); }},
  };
  return k;
}

absl::Status set_key(DaemonConfig& c, std::string_view key, std::string_view value, std::string_view where) {
  for (const Key& k : keys()) {
    if (key != k.name) continue;
    if (!k.set(c, value)) {
      return absl::InvalidArgumentError(absl::StrCat(std::string(where), ": bad value \"", std::string(value), "\" for ", k.name,
                                                     " (", k.help, ")"));
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(std::string(where), ": unknown setting \"", std::string(key),
                                                 "\" (memd --help lists them)"));
}

absl::Status load_file(DaemonConfig& c, const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read config file ", path, ": ", std::strerror(errno)));
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::string_view l = line;
    if (size_t hash = l.find('#'); hash != std::string_view::npos) l = l.substr(0, hash);
    absl::string_view t = absl::StripAsciiWhitespace(absl::string_view(l.data(), l.size()));
    if (t.empty()) continue;
    size_t eq = t.find('=');
    std::string where = absl::StrCat(path, ":", n);
    if (eq == absl::string_view::npos) return absl::InvalidArgumentError(absl::StrCat(where, ": expected key = value"));
    absl::string_view key = absl::StripAsciiWhitespace(t.substr(0, eq));
    absl::string_view value = absl::StripAsciiWhitespace(t.substr(eq + 1));
    if (absl::Status s = set_key(c, std::string_view(key.data(), key.size()),
                                 std::string_view(value.data(), value.size()), where);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// Settings each valid alone that cannot hold together.
absl::Status check_consistent(const DaemonConfig& c) {
  if (c.telemetry_bytes_per_uid < c.telemetry_bytes_per_session) {
    return absl::InvalidArgumentError(absl::StrCat(
        "telemetry-bytes-per-uid (", c.telemetry_bytes_per_uid, ") must be at least telemetry-bytes-per-session (",
        c.telemetry_bytes_per_session, "): one session of a user may store up to the latter"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CommandLine> parse_command_line(int argc, char** argv) {
  CommandLine cl;
  cl.config = embedded_defaults();
  // The config file first, wherever --config appears, so that flags win.
  std::vector<std::pair<std::string, std::string>> flags;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--help" || a == "-h") { cl.help = true; continue; }
    if (a == "--version") { cl.version = true; continue; }
    if (a == "--print-config") { cl.print_config = true; continue; }
    if (a.substr(0, 2) != "--") return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", std::string(a), "\""));
    a.remove_prefix(2);
    std::string key, value;
    if (size_t eq = a.find('='); eq != std::string_view::npos) {
      key = std::string(a.substr(0, eq));
      value = std::string(a.substr(eq + 1));
    } else {
      key = std::string(a);
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat("--", key, " needs a value"));
      value = argv[++i];
    }
    flags.emplace_back(key, value);
  }
  for (auto& [k, v] : flags) {
    if (k == "config") {
      if (absl::Status s = load_file(cl.config, v); !s.ok()) return s;
    }
  }
  for (auto& [k, v] : flags) {
    if (k == "config") continue;
    if (absl::Status s = set_key(cl.config, k, v, absl::StrCat("--", k)); !s.ok()) return s;
  }
  if (absl::Status s = check_consistent(cl.config); !s.ok()) return s;
  return cl;
}

std::string usage() {
  std::string u =
      "usage: memd [--config FILE] [--KEY VALUE]... [--print-config] [--version]\n"
      "\n"
      "memd serves shared and persistent memory regions to client processes\n"
      "(libmemd) over gRPC on a Unix socket. It runs with embedded defaults;\n"
      "a config file holds `key = value` lines, and flags override both.\n"
      "SIGTERM or SIGINT shut it down cleanly (file regions are checkpointed).\n"
      "\n"
      "settings (default):\n";
  DaemonConfig d = embedded_defaults();
  for (const Key& k : keys()) {
    absl::StrAppend(&u, "  --", k.name, std::string(k.name).size() < 20 ? std::string(20 - std::string(k.name).size(), ' ') : " ",
                    k.help, " (", k.get(d), ")\n");
  }
  absl::StrAppend(&u, "\nenvironment: ", kEnvironmentHelp, "\n");
  return u;
}

std::vector<SettingDoc> setting_docs() {
  std::vector<SettingDoc> docs;
  DaemonConfig d = embedded_defaults();
  for (const Key& k : keys()) docs.push_back({k.name, k.help, k.get(d)});
  return docs;
}

std::string describe(const DaemonConfig& c) {
  std::string out;
  for (const Key& k : keys()) absl::StrAppend(&out, k.name, " = ", k.get(c), "\n");
  return out;
}

}  // namespace memd::daemon
