// One step of a walk up the stack by frame pointers (memd is built with
// them: CMakeLists.txt), for the telemetry sampler's stacks and the shim
// debug method's call site. Tens of nanoseconds a walk, where a DWARF unwind
// costs microseconds, and no library.
#pragma once

#include <cstdint>

namespace memd::client {

// The frame that `fp`'s saved link names (its caller's), or nullptr where
// the link cannot be one: code built without frame pointers leaves anything
// in the register, so a link is followed only upwards, by less than a frame
// could span, and aligned, and a walk ends rather than read far away.
// `fp[1]` is the frame's return address. Inlined into walkers that are
// themselves not instrumented: they read other functions' frames.
__attribute__((always_inline, no_sanitize("address", "thread"))) inline uintptr_t* caller_frame(
    const uintptr_t* fp) {
  constexpr uintptr_t kMaxFrameBytes = 100000;
  uintptr_t next = fp[0], at = reinterpret_cast<uintptr_t>(fp);
  if (next <= at || next - at > kMaxFrameBytes || next % sizeof(uintptr_t) != 0) return nullptr;
  return reinterpret_cast<uintptr_t*>(next);
}

}  // namespace memd::client
