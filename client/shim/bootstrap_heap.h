// The bootstrap heap: a static buffer that serves allocations made while
// the shim cannot use the real heap — before the process heap exists, or
// from inside the shim itself (a library it calls into calling malloc).
// Bump allocation only; frees of its memory are ignored; it is never reused,
// so its memory reads as zero.
#pragma once

#include <cstddef>

namespace memd::client {

void* bootstrap_alloc(size_t size, size_t align);
bool bootstrap_contains(const void* p);
size_t bootstrap_size(const void* p);

}  // namespace memd::client
