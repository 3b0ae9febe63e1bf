// The daemon's socket paths, apart from the process settings (options.h):
// they allocate strings, and the malloc shim, which links options.cc, must
// not pull the C++ string library in for them (it carries its own C++
// runtime, and every part of it is mapped in every program it runs).
#pragma once

#include <string>

namespace memd::region {

// Where memd listens unless told otherwise, decided here once for the
// daemon and libmemd alike, and never relative to the working directory (a
// program started anywhere finds the daemon): $MEMD_SOCKET, else the user's
// own socket, $XDG_RUNTIME_DIR/memd/memd.sock (if that is an absolute
// path), else /run/memd/memd.sock for root, else /tmp/memd-<uid>/memd.sock
// (memd refuses that directory if another user made it first). Allocates:
// not for the shim's malloc path.
std::string daemon_socket_path();
// Where libmemd looks: daemon_socket_path(), unless $MEMD_SOCKET is unset,
// no socket is there, and the system daemon's is (kSystemSocket): then that.
std::string client_socket_path();
inline constexpr char kSystemSocket[] = "/run/memd/memd.sock";

}  // namespace memd::region
