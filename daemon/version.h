// The daemon's version, defined once: CMake's project version (the top-level
// CMakeLists.txt), which --version, the Stats call and memd_build_info report.
#pragma once

namespace memd::daemon {

inline constexpr char kVersion[] = MEMD_VERSION;
inline constexpr char kProtocol[] = "memd.v1";

}  // namespace memd::daemon
