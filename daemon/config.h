// memd's configuration: embedded defaults, then an optional config file
// (`key = value` lines), then command-line flags, each overriding the last.
// `memd --help` lists every key; `memd --print-config` shows the result.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace memd::daemon {

struct DaemonConfig {
  // Where clients connect: $MEMD_SOCKET, else the default both memd and
  // libmemd compute (region/socket_paths.h daemon_socket_path(): never relative).
  std::string socket_path;
  uint32_t socket_mode = 0666;  // who may connect; regions have their own modes
  // Region files and the catalog: $MEMD_DATA_DIR, else ./run/data.
  std::string data_dir;
  // Prefix of the daemon's shm objects (/dev/shm/memd.<namespace>.<region>),
  // so that several daemons on one host keep apart. Empty: none.
  std::string shm_namespace;
  std::string metrics_address = "127.0.0.1:9464";  // served with telemetry
  std::string log_level = "info";
  // Defaults of regions created without sizes.
  uint64_t region_bytes = uint64_t{1} << 30;
  uint32_t region_clients = 64;
  uint32_t region_threads = 1024;
  uint64_t max_region_bytes = uint64_t{1} << 40;  // the largest a client may ask for
  uint32_t max_regions = 256;
  // Quotas: blocks one client may hold in one region (0: no limit), and
  // sessions at once.
  uint64_t client_block_quota = 0;
  uint32_t max_sessions = 1024;
  // What one local user may take of what all share: a session holds a
  // daemon thread, a connection two descriptors, a region memory. Root is
  // exempt (it can stop the daemon anyway); the global limits above bound it.
  uint32_t max_sessions_per_uid = 128;
  uint32_t max_sessions_per_process = 16;
  uint32_t max_connections_per_uid = 256;
  uint32_t max_regions_per_uid = 64;
  // Bytes of region objects one user may own, summed over their regions as
  // the objects grow (0: no limit; root: no limit).
  uint64_t max_bytes_per_uid = 0;
  // A connection that has made no call this long after it was accepted is
  // closed (one that connects and sends nothing holds a descriptor).
  uint32_t handshake_timeout_s = 10;
  // A connection that has made calls, has none in progress (a session
  // stream is one, for its whole life) and has had none for this long is
  // closed (each holds two descriptors and gRPC's buffers). 0: never.
  uint32_t idle_timeout_s = 300;
  // Shutting down: calls in progress get this long to finish before they
  // are cancelled (session streams end at once).
  uint32_t drain_timeout_s = 2;
  // Client telemetry: bytes of sampled allocations and symbols kept per
  // session (and per region, for those of ended sessions); beyond them
  // samples are dropped and counted (memd_telemetry_rejected_total).
  uint64_t telemetry_bytes_per_session = uint64_t{8} << 20;
  // The same, summed over the live sessions of one uid (root too: its
  // sessions are bounded in number only by max-sessions). At least
  // telemetry_bytes_per_session.
  uint64_t telemetry_bytes_per_uid = uint64_t{64} << 20;
  // Shutting down: checkpoint file regions (msync) before closing.
  bool checkpoint_on_exit = true;
};

// What the command line asked for.
struct CommandLine {
  DaemonConfig config;
  bool help = false;
  bool version = false;
  bool print_config = false;
};

// Defaults, then the file named by --config (if any), then flags. Unknown
// keys, malformed values and values that contradict each other are errors
// that name them.
absl::StatusOr<CommandLine> parse_command_line(int argc, char** argv);
std::string usage();

// The settings as `memd --help` and the man page show them (tools/manual/):
// name, meaning and embedded default (which the environment may change).
struct SettingDoc {
  std::string name;
  std::string help;
  std::string default_value;
};
std::vector<SettingDoc> setting_docs();

inline constexpr const char* kEnvironmentHelp =
    "MEMD_SOCKET, MEMD_DATA_DIR, XDG_RUNTIME_DIR set the defaults (without\n"
    "MEMD_SOCKET or XDG_RUNTIME_DIR the socket is /run/memd/memd.sock for root,\n"
    "/tmp/memd-<uid>/memd.sock for others).";
std::string describe(const DaemonConfig& c);  // as a config file would say it

}  // namespace memd::daemon
