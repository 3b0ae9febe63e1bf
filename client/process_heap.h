// The process heap: the arena that malloc (through the shim) and
// memd::Heap::process() use. Created on first use from the environment
// options; never destroyed. Safe to call from inside malloc.
#pragma once

#include <atomic>
#include <cstdint>

#include "region/thread_heaps.h"

namespace memd::client {

// The process arena's handle; arena == nullptr (errno set) if it could not be
// created.
const region::ArenaHandle& process_arena();

// Whether the process arena exists yet (no creation).
const region::ArenaHandle* process_arena_if_created();

}  // namespace memd::client
