// The loop behind wl_zeroed_buffers and wl_calloc_buffers: 20 large buffers
// (5–25 MiB) alive at once, one of them replaced at random on every step, each
// new buffer zeroed before use — decoders, compressors and matrix code that
// want a clean buffer of a size they learn at run time.
//
// How the zeroing is asked for is the variant's one difference: malloc and a
// memset of the whole buffer (every page written), or calloc (the allocator
// may skip the zeroing when it knows the memory is fresh from the kernel).
// After zeroing, both use the buffer the same sparse way: one word in every
// 64 KiB is read (it must be zero) and then overwritten. An allocator that
// discards freed pages pays a page fault for every page the next buffer
// touches; one that keeps them dirty must zero them itself for calloc. The
// harness's minor-faults column shows which one happened.
#pragma once

#include <vector>

#include "common.h"

namespace wl {

constexpr size_t kZeroedAlive = 20;
constexpr uint64_t kZeroedReplacements = 200;  // at scale 1; the 2,000 is --scale 10
constexpr size_t kZeroedMin = 5u << 20;
constexpr size_t kZeroedMax = 25u << 20;
constexpr size_t kZeroedStride = 64u << 10;  // bytes between the words written after zeroing

// Hides where a pointer came from. Without it the compiler may turn malloc +
// memset into calloc, or assume calloc's memory is zero and drop the check
// below: the workload must measure what the allocator does.
template <class T>
T* opaque(T* p) {
  asm volatile("" : "+r"(p));
  return p;
}

struct ZeroedBuffer {
  uint64_t* words = nullptr;
  size_t bytes = 0;
  uint64_t tag = 0;
};

// `zeroed(n)` returns n zero bytes (malloc + memset, or calloc).
template <class ZeroedAlloc>
int run_zeroed_buffers(int argc, char** argv, ZeroedAlloc zeroed) {
  Args args = parse_args(argc, argv, 1, false);
  uint64_t replacements = scaled(kZeroedReplacements, args.scale);
  constexpr size_t kStep = kZeroedStride / sizeof(uint64_t);

  Rng rng(5025);
  LiveBytes live;
  uint64_t h = 0;
  std::vector<ZeroedBuffer> bufs(kZeroedAlive);
  live.add(kZeroedAlive * sizeof(ZeroedBuffer));

  auto fresh = [&](ZeroedBuffer& b) {
    b.bytes = rng.range(kZeroedMin, kZeroedMax) & ~size_t{7};
    b.tag = rng.next();
    b.words = static_cast<uint64_t*>(opaque(zeroed(b.bytes)));
    live.add(b.bytes);
    size_t n = b.bytes / sizeof(uint64_t);
    uint64_t nonzero = 0;
    for (size_t i = 0; i < n; i += kStep) {
      nonzero |= b.words[i];
      b.words[i] = b.tag + i;
    }
    nonzero |= b.words[n - 1];
    if (nonzero != 0) die("zeroed buffer was not zero");
    b.words[n - 1] = b.tag;
  };
  auto retire = [&](ZeroedBuffer& b) {
    size_t n = b.bytes / sizeof(uint64_t);
    size_t probe = (rng.below(n) / kStep) * kStep;  // one of the written words
    if (b.words[probe] != b.tag + probe || b.words[n - 1] != b.tag) die("buffer corrupted");
    h = mix(h, b.words[probe] ^ b.words[n - 1]);
    std::free(b.words);
    live.sub(b.bytes);
  };

  for (ZeroedBuffer& b : bufs) fresh(b);
  for (uint64_t i = 0; i < replacements; ++i) {
    ZeroedBuffer& b = bufs[rng.below(kZeroedAlive)];
    retire(b);
    fresh(b);
  }
  for (ZeroedBuffer& b : bufs) retire(b);
  report(h, live.peak());
  return 0;
}

}  // namespace wl
