// The two systemd protocols memd speaks, without linking libsystemd:
//
// - readiness (Type=notify): a datagram "READY=1" to $NOTIFY_SOCKET once the
//   socket accepts clients, "STOPPING=1" when shutdown begins;
// - socket activation (memd.socket): systemd binds the socket, passes it as
//   descriptor 3 with LISTEN_FDS=1 and LISTEN_PID=<our pid>, and queues
//   the connections that arrive while memd starts or restarts.
//
// Both are no-ops when the variables are absent (memd started by hand).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace memd::daemon {

// The listening socket systemd passed, or -1 if none was passed to this
// process. Takes the variables out of the environment (a program memd ran
// would otherwise believe they are its own), so call it once, before any
// thread starts. An error when what was passed is not one listening Unix
// stream socket.
absl::StatusOr<int> take_activated_socket();

// The path a Unix socket is bound to ("" if it has none).
std::string bound_path(int fd);

// Sends `state` (newline-separated KEY=VALUE lines) to the service manager;
// OK without doing anything when memd has none ($NOTIFY_SOCKET unset).
absl::Status notify_service_manager(std::string_view state);

}  // namespace memd::daemon
