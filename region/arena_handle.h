// A handle on an arena registered in the process's thread-heap table
// (region/thread_heaps.h): what a memd::Heap holds. Declarations only, so
// the public client/heap.h names it without pulling in the heap.
#pragma once

#include <cstdint>

namespace memd::region {

class ThreadHeapHost;
class Arena;

struct ArenaHandle {
  ThreadHeapHost* host = nullptr;
  Arena* arena = nullptr;  // the private arena behind `host`, if it is one
  uint32_t id = 0;
  uint32_t generation = 0;
};

}  // namespace memd::region
