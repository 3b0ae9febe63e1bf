#include "tools/memdctl/replay_command.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "tools/memdctl/commands.h"

namespace memd::memdctl {
namespace {

struct Target {
  std::string name;
  std::string preload;                                     // empty: none (glibc)
  std::vector<std::pair<std::string, std::string>> env;    // added for this target
};

struct Result {
  bool ok = false;
  std::string error;
  uint64_t ops = 0;
  double seconds = 0;
  long space_kib = 0;  // peak resident over the resident memory before the first call
};

// The other mallocs, by the soname of their Debian package's library.
const std::map<std::string, std::string>& peer_libraries() {
  static const std::map<std::string, std::string> peers = {
      {"jemalloc", "libjemalloc.so.2"}, {"mimalloc", "libmimalloc.so.2"}, {"tcmalloc", "libtcmalloc_minimal.so.4"}};
  return peers;
}

std::string own_directory() {
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return ".";
  path[n] = '\0';
  std::string p(path);
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

// The first of `candidates` that exists, or of $variable if set.
std::optional<std::string> find_file(const char* variable, const std::vector<std::string>& candidates) {
  if (const char* v = std::getenv(variable); v != nullptr && *v != '\0') return std::string(v);
  for (const std::string& c : candidates) {
    if (access(c.c_str(), R_OK) == 0) return c;
  }
  return std::nullopt;
}

// Runs memd-replay on the trace with the target's malloc; parses its line.
Result replay_once(const std::string& tool, const std::string& trace, const Target& t) {
  Result r;
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    r.error = std::strerror(errno);
    return r;
  }
  pid_t pid = fork();
  if (pid < 0) {
    r.error = std::strerror(errno);
    return r;
  }
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(out[1], STDERR_FILENO);
    if (t.preload.empty()) unsetenv("LD_PRELOAD");
    else setenv("LD_PRELOAD", t.preload.c_str(), 1);
    for (const char* v : {"VMDEBUG", "VMPROFILE", "VMTRACE", "MEMD_METHOD", "MEMD_TRACE", "MEMD_REGION",
                          "MEMD_REPLAY_REGION"}) {
      unsetenv(v);
    }
    for (const auto& [k, v] : t.env) setenv(k.c_str(), v.c_str(), 1);
    execl(tool.c_str(), tool.c_str(), trace.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  // A preload that failed leaves the program on glibc: not this target.
  if (text.find("cannot be preloaded") != std::string::npos) {
    r.error = "not installed";
    return r;
  }
  unsigned long long ops = 0;
  long base = 0, peak = 0;
  double seconds = 0;
  const char* line = std::strstr(text.c_str(), "ops=");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || line == nullptr ||
      std::sscanf(line, "ops=%llu %*s %*s %*s %*s %*s seconds=%lf base_kib=%ld peak_kib=%ld", &ops, &seconds, &base,
                  &peak) != 4) {
    std::string first = text.substr(0, text.find('\n'));
    r.error = first.empty() ? "memd-replay failed" : first;
    return r;
  }
  r.ok = true;
  r.ops = ops;
  r.seconds = seconds;
  r.space_kib = peak - base;
  return r;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

}  // namespace

int run_replay(const CommandLine& cl) {
  const std::string& trace = cl.args[0];
  if (access(trace.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "memdctl: replay: cannot read %s: %s\n", trace.c_str(), std::strerror(errno));
    return 1;
  }
  const std::string dir = own_directory();
  std::optional<std::string> tool = find_file("MEMD_REPLAY_TOOL", {dir + "/memd-replay", dir + "/../replay/memd-replay"});
  std::optional<std::string> shim =
      find_file("MEMD_MALLOC_SHIM", {dir + "/../../client/libmemd-malloc.so", dir + "/../lib/libmemd-malloc.so",
                                     dir + "/libmemd-malloc.so"});
  if (!tool) {
    std::fprintf(stderr, "memdctl: replay: memd-replay not found beside memdctl (set MEMD_REPLAY_TOOL)\n");
    return 1;
  }

  std::vector<Target> targets;
  std::string allocators = cl.replay_allocators.empty() ? "glibc,jemalloc,mimalloc" : cl.replay_allocators;
  std::vector<std::string> allocator_names = absl::StrSplit(allocators, ',', absl::SkipEmpty());
  for (const std::string& name : allocator_names) {
    if (name == "glibc") {
      targets.push_back({name, "", {}});
    } else if (auto it = peer_libraries().find(name); it != peer_libraries().end()) {
      targets.push_back({name, it->second, {}});
    } else {
      std::fprintf(stderr, "memdctl: replay: unknown allocator \"%s\" (glibc, jemalloc, mimalloc, tcmalloc)\n",
                   name.c_str());
      return kExitUsage;
    }
  }
  std::string methods = cl.replay_methods.empty() ? "best,debug,profile" : cl.replay_methods;
  std::vector<std::string> method_names = absl::StrSplit(methods, ',', absl::SkipEmpty());
  for (const std::string& name : method_names) {
    Target t{"memd-" + name, shim.value_or(""), {}};
    // pool, last and region: the calls go to vmalloc.h regions in
    // memd-replay itself (no preload); the others run under the shim.
    if (name == "pool" || name == "last" || name == "region") {
      targets.push_back({"memd-" + name, "", {{"MEMD_REPLAY_REGION", name == "region" ? "best" : name}}});
      continue;
    }
    if (name == "debug") t.env = {{"VMDEBUG", "1"}};
    else if (name == "profile") t.env = {{"MEMD_METHOD", "profile"}, {"MEMD_PROFILE", "/dev/null"}};
    else if (name != "best") {
      std::fprintf(stderr, "memdctl: replay: unknown method \"%s\" (best, debug, profile, region, pool, last)\n",
                   name.c_str());
      return kExitUsage;
    }
    if (!shim) {
      std::fprintf(stderr, "memdctl: replay: libmemd-malloc.so not found (set MEMD_MALLOC_SHIM)\n");
      return 1;
    }
    targets.push_back(t);
  }

  // Every round runs every target; ratios are to glibc in the same round.
  const int rounds = cl.replay_rounds;
  std::vector<std::vector<Result>> results(targets.size());
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < targets.size(); ++i) results[i].push_back(replay_once(*tool, trace, targets[i]));
  }
  size_t glibc = targets.size();
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i].name == "glibc") glibc = i;
  }

  int exit_code = kExitOk;
  if (cl.json) std::printf("[");
  else std::printf("%-14s %10s %10s %8s %10s %8s\n", "target", "calls", "seconds", "x glibc", "space KiB", "x glibc");
  for (size_t i = 0; i < targets.size(); ++i) {
    std::vector<double> seconds, space, time_ratio, space_ratio;
    std::string error;
    uint64_t ops = 0;
    for (int round = 0; round < rounds; ++round) {
      const Result& r = results[i][round];
      if (!r.ok) {
        error = r.error;
        continue;
      }
      ops = r.ops;
      seconds.push_back(r.seconds);
      space.push_back(static_cast<double>(r.space_kib));
      if (glibc < targets.size() && results[glibc][round].ok) {
        const Result& g = results[glibc][round];
        if (g.seconds > 0) time_ratio.push_back(r.seconds / g.seconds);
        if (g.space_kib > 0) space_ratio.push_back(static_cast<double>(r.space_kib) / static_cast<double>(g.space_kib));
      }
    }
    if (seconds.empty() && error != "not installed") exit_code = 1;
    if (cl.json) {
      std::printf("%s{\"target\":\"%s\",", i ? "," : "", targets[i].name.c_str());
      if (seconds.empty()) {
        std::printf("\"error\":\"%s\"}", error.c_str());
      } else {
        std::printf("\"calls\":%llu,\"seconds\":%.6f,\"space_kib\":%.0f,\"time_vs_glibc\":%.4f,\"space_vs_glibc\":%.4f",
                    static_cast<unsigned long long>(ops), median(seconds), median(space), median(time_ratio),
                    median(space_ratio));
        // Each round's own figures (null where it failed), for ratios
        // between other targets paired by round.
        std::printf(",\"rounds\":[");
        for (int round = 0; round < rounds; ++round) {
          const Result& r = results[i][round];
          if (r.ok) std::printf("%s{\"seconds\":%.6f,\"space_kib\":%ld}", round ? "," : "", r.seconds, r.space_kib);
          else std::printf("%snull", round ? "," : "");
        }
        std::printf("]}");
      }
      continue;
    }
    if (seconds.empty()) {
      std::printf("%-14s %s\n", targets[i].name.c_str(), error.c_str());
      continue;
    }
    auto ratio = [](const std::vector<double>& v) {
      if (v.empty()) return std::string("-");
      char text[32];
      std::snprintf(text, sizeof text, "%.2f", median(v));
      return std::string(text);
    };
    std::printf("%-14s %10llu %10.4f %8s %10.0f %8s\n", targets[i].name.c_str(), static_cast<unsigned long long>(ops),
                median(seconds), ratio(time_ratio).c_str(), median(space), ratio(space_ratio).c_str());
  }
  if (cl.json) std::printf("]\n");
  else std::printf("(%d round%s; medians; ratios to glibc taken per round)\n", rounds, rounds == 1 ? "" : "s");
  return exit_code;
}

}  // namespace memd::memdctl
