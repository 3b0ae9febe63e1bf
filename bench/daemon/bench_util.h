// Small helpers shared by the daemon benchmarks: a monotonic clock in
// nanoseconds, whole reads and writes on pipes, percentiles, and argument
// parsing of the `--name value` kind.
//
// The benchmarks fork their client processes from a parent that never
// touches gRPC: gRPC is not fork-safe, so every child creates its own
// memd::Client after the fork and the parent only coordinates (pipes).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

namespace memd_bench {

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

[[noreturn]] inline void die(const std::string& what) {
  std::fprintf(stderr, "%s[%d]: %s\n", program_invocation_short_name, static_cast<int>(getpid()), what.c_str());
  std::fflush(stderr);
  _exit(1);  // a forked child must not run the parent's atexit handlers
}

inline void write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) die(std::string("write to a pipe: ") + std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Reads exactly n bytes; false on end of file (the writer died or gave up).
inline bool read_all(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) die(std::string("read from a pipe: ") + std::strerror(errno));
    if (r == 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// The q-quantile (0..1) of sorted samples, nearest rank.
inline double quantile(const std::vector<uint32_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(q * static_cast<double>(sorted.size()));
  return sorted[std::min(rank, sorted.size() - 1)];
}

inline double mean(const std::vector<uint32_t>& v) {
  if (v.empty()) return 0;
  double sum = 0;
  for (uint32_t x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

// `--name value` arguments, all of them given as pairs.
class Args {
 public:
  Args(int argc, char** argv, const char* usage) : usage_(usage) {
    for (int i = 1; i < argc; ++i) {
      if (std::strncmp(argv[i], "--", 2) != 0 || i + 1 >= argc) bad();
      pairs_.emplace_back(argv[i] + 2, argv[i + 1]);
      ++i;
    }
  }
  // Every name given must be one of `known`.
  void only(std::initializer_list<const char*> known) const {
    for (const auto& kv : pairs_) {
      if (std::none_of(known.begin(), known.end(), [&](const char* k) { return kv.first == k; })) bad();
    }
  }
  std::string text(const char* name, const std::string& fallback) const {
    for (const auto& [k, v] : pairs_)
      if (k == name) return v;
    return fallback;
  }
  uint64_t number(const char* name, uint64_t fallback) const {
    std::string v = text(name, "");
    if (v.empty()) return fallback;
    char* end = nullptr;
    errno = 0;
    unsigned long long n = std::strtoull(v.c_str(), &end, 10);
    if (errno != 0 || *end != '\0') bad();
    return n;
  }
  double real(const char* name, double fallback) const {
    std::string v = text(name, "");
    if (v.empty()) return fallback;
    char* end = nullptr;
    double d = std::strtod(v.c_str(), &end);
    if (*end != '\0' || !(d > 0)) bad();
    return d;
  }
  [[noreturn]] void bad() const {
    std::fputs(usage_, stderr);
    std::exit(2);
  }

 private:
  const char* usage_;
  std::vector<std::pair<std::string, std::string>> pairs_;
};

}  // namespace memd_bench
