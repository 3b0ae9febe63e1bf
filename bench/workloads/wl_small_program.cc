// wl_small_program: many runs of a small, short-lived program — the shape of
// a command-line tool or a build step, where a process allocates a few MiB,
// answers and exits. Peak RSS is then mostly the allocator's start-up
// footprint (its metadata, the memory it reserves and touches up front, the
// way it rounds a few MiB of small objects into pages), and the time is
// mostly process start-up and first-touch page faults.
//
// The program runs itself as a child (`wl_small_program --child SEED`) one
// after another; LD_PRELOAD and the allocator's settings pass to each child
// through the environment. bench_launch's wait4() sees the whole tree: time
// and minor faults are summed over the runs, peak RSS is the largest single
// run's. Each child builds a text of ~40k words, counts them and indexes their
// positions in hash maps of std::string, formats the top of the list, prints
// a checksum and exits, all through a counting std allocator so its live
// bytes are exact.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common.h"

extern char** environ;

namespace {

constexpr uint64_t kRuns = 40;  // child processes, at scale 1
constexpr size_t kVocabulary = 5000;
constexpr size_t kWords = 40'000;
constexpr size_t kTop = 200;

wl::LiveBytes g_live;

// malloc underneath, as libstdc++'s operator new would, plus an exact count.
template <class T>
struct Counted {
  using value_type = T;
  Counted() = default;
  template <class U>
  Counted(const Counted<U>&) {}
  T* allocate(size_t n) {
    g_live.add(n * sizeof(T));
    return static_cast<T*>(wl::xmalloc(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) {
    g_live.sub(n * sizeof(T));
    std::free(p);
  }
  template <class U>
  bool operator==(const Counted<U>&) const { return true; }
};

using String = std::basic_string<char, std::char_traits<char>, Counted<char>>;
template <class T>
using Vector = std::vector<T, Counted<T>>;
// std::hash has no specialisation for a string with another allocator.
struct Hash {
  size_t operator()(const String& s) const { return std::hash<std::string_view>{}(s); }
};
template <class V>
using Map = std::unordered_map<String, V, Hash, std::equal_to<String>, Counted<std::pair<const String, V>>>;

String random_word(wl::Rng& rng) {
  // Mostly short words (inside std::string's own buffer), some long enough to
  // need a heap buffer.
  size_t len = rng.log_uniform(2, 40);
  String w;
  for (size_t i = 0; i < len; ++i) w.push_back(static_cast<char>('a' + rng.below(26)));
  return w;
}

uint64_t child(uint64_t seed) {
  wl::Rng rng(seed);
  Vector<String> vocabulary;
  for (size_t i = 0; i < kVocabulary; ++i) vocabulary.push_back(random_word(rng));

  // The "input": a text grown by appending, as a file read line by line is.
  String text;
  for (size_t i = 0; i < kWords; ++i) {
    // Zipf-like: low indices are much more frequent.
    size_t k = static_cast<size_t>(rng.log_uniform(1, kVocabulary)) - 1;
    text += vocabulary[k];
    text += (i % 12 == 11) ? '\n' : ' ';
  }

  Map<uint32_t> counts;
  Map<Vector<uint32_t>> positions;
  size_t start = 0;
  uint32_t index = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] != ' ' && text[i] != '\n') continue;
    if (i > start) {
      String word = text.substr(start, i - start);
      ++counts[word];
      positions[word].push_back(index++);
    }
    start = i + 1;
  }

  Vector<std::pair<uint32_t, String>> ranked;
  for (const auto& [word, n] : counts) ranked.emplace_back(n, word);
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });

  uint64_t h = wl::mix(counts.size(), index);
  String line;
  for (size_t i = 0; i < std::min(kTop, ranked.size()); ++i) {
    const auto& [n, word] = ranked[i];
    line = word;
    line += ": ";
    line += std::to_string(n).c_str();
    line += " first at ";
    line += std::to_string(positions[word].front()).c_str();
    for (char c : line) h = wl::mix(h, static_cast<unsigned char>(c));
  }
  return h;
}

// Runs one child and reads back the two numbers it prints.
void run_child(const char* self, uint64_t seed, uint64_t& checksum, size_t& peak) {
  int fds[2];
  if (pipe(fds) != 0) wl::die("pipe");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::string seed_arg = std::to_string(seed);
  char* child_argv[] = {const_cast<char*>(self), const_cast<char*>("--child"), seed_arg.data(), nullptr};
  pid_t pid;
  if (posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, child_argv, environ) != 0) wl::die("posix_spawn");
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);

  char out[256];
  size_t got = 0;
  ssize_t n;
  while (got < sizeof out - 1 && (n = read(fds[0], out + got, sizeof out - 1 - got)) > 0) got += static_cast<size_t>(n);
  out[got] = '\0';
  close(fds[0]);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) wl::die("child failed");

  unsigned long long child_sum = 0;
  size_t child_peak = 0;
  if (std::sscanf(out, "checksum=%llx peak_live_bytes=%zu", &child_sum, &child_peak) != 2) {
    wl::die("child printed no result");
  }
  checksum = wl::mix(checksum, child_sum);
  peak = std::max(peak, child_peak);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--child") == 0) {
    uint64_t h = child(std::strtoull(argv[2], nullptr, 10));
    std::printf("checksum=%016llx peak_live_bytes=%zu\n", static_cast<unsigned long long>(h), g_live.peak());
    return 0;
  }
  wl::Args args = wl::parse_args(argc, argv, 1, false);
  uint64_t runs = wl::scaled(kRuns, args.scale);
  uint64_t checksum = 0;
  size_t peak = 0;
  for (uint64_t i = 0; i < runs; ++i) run_child(argv[0], 1000 + i % 8, checksum, peak);
  wl::report(checksum, peak);
  return 0;
}
