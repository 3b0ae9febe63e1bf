// Helpers for region tests: unique names, a temporary directory that is
// removed afterwards, and cleanup of shm objects.
#pragma once

#include <gtest/gtest.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "region/region.h"

namespace memd::testing {

// The fields of a child's settings, "a|b|c" as the tests that spawn one
// write them.
inline std::vector<std::string> split_fields(const std::string& s) {
  std::vector<std::string> out;
  for (size_t from = 0;;) {
    size_t bar = s.find('|', from);
    out.push_back(s.substr(from, bar == std::string::npos ? std::string::npos : bar - from));
    if (bar == std::string::npos) return out;
    from = bar + 1;
  }
}

// Starts this test binary again as a fresh process (exec'd, not forked: it
// reads its environment anew, and may start threads under ThreadSanitizer,
// which a fork of a threaded process may not), with only the tests `filter`
// names and the settings `env` ("NAME=value") in front of this process's
// environment, which they override. Returns its pid, or -1. Descriptors
// without FD_CLOEXEC are inherited.
inline pid_t spawn_self(const std::string& filter, const std::vector<std::string>& env) {
  std::vector<std::string> own = env;
  std::vector<char*> envp;
  for (std::string& e : own) envp.push_back(e.data());
  for (char** e = environ; *e; ++e) {
    bool overridden = false;
    for (const std::string& mine : env) {
      size_t eq = mine.find('=');
      overridden |= std::strncmp(*e, mine.c_str(), eq + 1) == 0;
    }
    if (!overridden) envp.push_back(*e);
  }
  envp.push_back(nullptr);
  std::string arg = "--gtest_filter=" + filter;
  char self[] = "/proc/self/exe";
  char* argv[] = {self, arg.data(), nullptr};
  pid_t pid;
  return posix_spawn(&pid, self, nullptr, nullptr, argv, envp.data()) == 0 ? pid : -1;
}

// The same, waiting for it: its wait status, or -1 if it could not start.
inline int run_self(const std::string& filter, const std::vector<std::string>& env) {
  pid_t pid = spawn_self(filter, env);
  int status = 0;
  return pid > 0 && waitpid(pid, &status, 0) == pid ? status : -1;
}

// Polls `done` until it holds or 30 s pass (a bound far above any wait a
// test means: a liveness check, not a timing one).
inline bool eventually(const std::function<bool()>& done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

inline std::string unique_name(const char* stem) {
  static std::atomic<int> counter{0};
  return std::string("test-") + stem + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

// A directory under TMPDIR (or /tmp), removed with everything in it.
class TempDir {
 public:
  TempDir() : TempDir(getenv("TMPDIR")) {}
  // Under `base` (null or empty: /tmp).
  explicit TempDir(const char* base) {
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/memd-region-XXXXXX";
    path_ = mkdtemp(tmpl.data()) ? tmpl : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The name to give Region calls for a discipline: shm names are plain, files
// live in `dir`.
inline std::string region_name(Discipline d, const TempDir& dir, const char* stem) {
  std::string n = unique_name(stem);
  return d == Discipline::kShm ? n : dir.file(n);
}

// Counts the kBadAddress events a region's handler hears (event_context).
struct Events {
  std::atomic<int> bad{0};
  static void on(void* ctx, RegionEvent e, const void*, const char*) {
    if (e == RegionEvent::kBadAddress) static_cast<Events*>(ctx)->bad.fetch_add(1);
  }
};

// A parameterized test's name for a discipline (INSTANTIATE_TEST_SUITE_P).
inline std::string discipline_test_name(const ::testing::TestParamInfo<Discipline>& info) {
  return info.param == Discipline::kShm ? "Shm" : info.param == Discipline::kFile ? "File" : "Pmem";
}

inline RegionOptions small_options(Discipline d, size_t bytes = size_t{64} << 20) {
  RegionOptions o;
  o.discipline = d;
  o.max_bytes = bytes;
  o.max_threads = 64;
  o.max_clients = 16;
  o.max_roots = 32;
  // Keep page-discard decisions out of the way of what the tests check.
  o.params.dirty_decay_ms = 1u << 30;
  return o;
}

// A region `name` of method `m` (small_options of `bytes`) whose kBadAddress
// events `events` counts; null, with a test failure, if it cannot be made.
inline std::unique_ptr<Region> make_method_region(const std::string& name, Discipline d, Method m, Events* events,
                                                  size_t bytes = size_t{64} << 20) {
  RegionOptions o = small_options(d, bytes);
  o.method = m;
  o.event_handler = Events::on;
  o.event_context = events;
  auto r = Region::create(name, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? std::move(*r) : nullptr;
}

// Object sizes of every kind, as a program publishing objects asks for
// them: mostly small and medium, some large, some huge up to `huge_max`.
inline size_t pick_object_size(std::mt19937& rng, uint32_t huge_max = 340000) {
  switch (rng() % 16) {
    case 0: return 20000 + rng() % 12000;                 // large
    case 1: return 40000 + rng() % (huge_max - 40000);    // huge
    default: return 8 + rng() % 500;                      // small and medium
  }
}

// A pattern an object can be checked against later: its bytes from `seed`.
inline void fill_pattern(char* p, size_t size, uint32_t seed) {
  for (size_t i = 0; i < size; i += 8) {
    uint64_t v = seed * 0x9e3779b97f4a7c15ull + i;
    std::memcpy(p + i, &v, std::min<size_t>(8, size - i));
  }
}
inline bool pattern_intact(const char* p, size_t size, uint32_t seed) {
  for (size_t i = 0; i < size; i += 8) {
    uint64_t v = seed * 0x9e3779b97f4a7c15ull + i;
    if (std::memcmp(p + i, &v, std::min<size_t>(8, size - i)) != 0) return false;
  }
  return true;
}

}  // namespace memd::testing
