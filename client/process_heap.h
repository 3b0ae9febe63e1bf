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

// The process arena's data span, for a quick "is this ours" test: zero
// until the arena exists. Relaxed reads are enough: a stale zero only sends
// the caller down its slow path.
struct ProcessSpan {
  std::atomic<uintptr_t> data{0};
  std::atomic<size_t> bytes{0};
  bool contains(const void* p) const {
    return reinterpret_cast<uintptr_t>(p) - data.load(std::memory_order_relaxed) <
           bytes.load(std::memory_order_relaxed);
  }
};
extern ProcessSpan process_span;

}  // namespace memd::client
