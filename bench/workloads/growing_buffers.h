// Buffers grown step by step with realloc, several at once (round-robin, so
// no buffer can simply keep extending into the free space behind it): the
// loop wl_realloc_growth and wl_big_realloc share. Each step checks that
// realloc kept the old contents and then writes the new part.
#pragma once

#include <cstdlib>
#include <vector>

#include "common.h"

namespace wl {

struct GrowingBuffer {
  unsigned char* data = nullptr;
  size_t size = 0;
  size_t target = 0;
  bool doubling = false;
};

// Grows every buffer to its target: next_size(buffer) gives each step's
// size, check(buffer, upto) verifies the first `upto` bytes, append(buffer,
// from, to) writes bytes [from, to).
template <class NextSize, class Check, class Append>
void grow_round_robin(std::vector<GrowingBuffer>& bufs, LiveBytes& live, NextSize next_size, Check check,
                      Append append) {
  for (bool growing = true; growing;) {
    growing = false;
    for (GrowingBuffer& b : bufs) {
      if (b.size >= b.target) continue;
      growing = true;
      size_t old = b.size;
      size_t next = std::min(next_size(b), b.target);
      void* p = std::realloc(b.data, next);
      if (p == nullptr) die("realloc returned null");
      b.data = static_cast<unsigned char*>(p);
      live.add(next - old);
      if (old > 0) check(b, old);
      append(b, old, next);
      b.size = next;
    }
  }
}

}  // namespace wl
