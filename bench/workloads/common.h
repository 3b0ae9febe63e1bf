// Shared helpers for the allocator workloads.
//
// The workloads only ever call malloc/free/realloc/new/delete: the allocator
// being measured is chosen at run time with LD_PRELOAD, so nothing here may
// depend on memd. Everything is deterministic (fixed seeds, no addresses or
// timings in the output) so the printed checksum must be identical under every
// allocator — a difference means an allocator corrupted or lost data.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace wl {

// splitmix64: tiny, fast, and good enough that size sequences look random.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Modulo bias is irrelevant for workload generation.
  uint64_t below(uint64_t n) { return next() % n; }
  uint64_t range(uint64_t lo, uint64_t hi) { return lo + below(hi - lo + 1); }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  // Log-uniform sizes: every octave is equally likely, which is closer to real
  // programs (many small objects, a tail of big ones) than a flat range.
  size_t log_uniform(size_t lo, size_t hi) {
    double l = std::log(static_cast<double>(lo));
    double h = std::log(static_cast<double>(hi));
    auto n = static_cast<size_t>(std::exp(l + unit() * (h - l)));
    return std::clamp(n, lo, hi);
  }

 private:
  uint64_t state_;
};

// Order-dependent hash step (FNV-style multiply) for single-threaded checksums.
inline uint64_t mix(uint64_t h, uint64_t v) {
  return (h ^ v) * 0x100000001B3ull + 0x9E3779B97F4A7C15ull;
}

// Exact count of the bytes the program itself requested and still holds.
// Peak live bytes is the denominator of the fragmentation ratio (peak RSS /
// peak live), so it counts requested sizes, never allocator-rounded ones.
class LiveBytes {
 public:
  void add(size_t n) {
    current_ += n;
    peak_ = std::max(peak_, current_);
  }
  void sub(size_t n) { current_ -= n; }
  size_t current() const { return current_; }
  size_t peak() const { return peak_; }

 private:
  size_t current_ = 0;
  size_t peak_ = 0;
};

[[noreturn]] inline void die(const char* what) {
  std::fprintf(stderr, "workload error: %s\n", what);
  std::abort();
}

inline void* xmalloc(size_t n) {
  void* p = std::malloc(n);
  if (p == nullptr) die("malloc returned null");
  return p;
}

// Writes a tag the checksum can read back. Small objects are filled entirely;
// bigger ones get one write per page, which is what makes their pages resident
// (so RSS reflects them) without turning the workload into a memset benchmark.
inline void fill(void* p, size_t n, uint64_t tag) {
  auto* b = static_cast<unsigned char*>(p);
  if (n <= 256) {
    std::memset(b, static_cast<int>(tag & 0xff), n);
  } else {
    for (size_t off = 0; off < n; off += 4096) b[off] = static_cast<unsigned char>(tag);
    b[n - 1] = static_cast<unsigned char>(tag);
  }
  std::memcpy(b, &tag, std::min<size_t>(n, sizeof tag));
}

// Reads back what fill() stored at the head (the first min(n, 8) bytes).
inline uint64_t read_tag(const void* p, size_t n) {
  uint64_t t = 0;
  std::memcpy(&t, p, std::min<size_t>(n, sizeof t));
  return t;
}

// Expected value of read_tag() after fill(p, n, tag).
inline uint64_t expected_tag(uint64_t tag, size_t n) {
  if (n >= sizeof tag) return tag;
  return tag & ((uint64_t{1} << (8 * n)) - 1);
}

// Command line shared by every workload: `wl_x [threads] [scale]`.
// scale multiplies the amount of work (iterations), not the object sizes.
struct Args {
  int threads;
  double scale;
};

inline Args parse_args(int argc, char** argv, int default_threads, bool multi_threaded) {
  Args a{default_threads, 1.0};
  if (argc > 1) a.threads = std::atoi(argv[1]);
  if (argc > 2) a.scale = std::atof(argv[2]);
  if (argc > 3 || a.threads < 1 || !(a.scale > 0)) {
    std::fprintf(stderr, "usage: %s [threads] [scale]\n", argv[0]);
    std::exit(2);
  }
  if (!multi_threaded && a.threads != 1) {
    std::fprintf(stderr, "%s is single-threaded: threads must be 1\n", argv[0]);
    std::exit(2);
  }
  return a;
}

inline uint64_t scaled(uint64_t base, double scale) {
  return std::max<uint64_t>(1, static_cast<uint64_t>(static_cast<double>(base) * scale));
}

// The two lines every workload prints; run_all.py parses `key=value` lines.
inline void report(uint64_t checksum, size_t peak_live_bytes) {
  std::printf("checksum=%016llx\n", static_cast<unsigned long long>(checksum));
  std::printf("peak_live_bytes=%zu\n", peak_live_bytes);
}

}  // namespace wl
