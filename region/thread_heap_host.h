// What hands out thread heaps over one region in this process: the private
// arena, or a shared region (its owner or a client). The thread-heap
// registry (thread_heaps.h) binds threads to hosts through this interface.
#pragma once

#include "heap/thread_heap.h"

namespace memd::region {

class ThreadHeapHost {
 public:
  virtual ~ThreadHeapHost() = default;
  // A thread heap for the calling thread; nullptr (errno EAGAIN) if every
  // owner slot is taken.
  virtual heap::ThreadHeap* attach_thread() = 0;
  // The thread is leaving: its blocks are released or abandoned.
  virtual void detach_thread(heap::ThreadHeap* heap) = 0;
  // Frees for threads without a heap: every free it makes is a remote one.
  virtual heap::ThreadHeap* stranger() const = 0;
};

}  // namespace memd::region
