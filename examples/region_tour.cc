// A tour of memd regions: a persistent heap file shared by processes.
//
//   region_tour [path]     (default: a file in a new temporary directory)
//
// The first process creates the region as its owner and serves leases; two
// worker processes attach, each adding words to a shared std::map and
// numbers to a shared std::vector (all in the region), and freeing objects
// the other made. Then the owner closes the region, reopens it as a fresh
// process would after a restart, and prints what is there.
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "region/region.h"
#include "region/region_allocator.h"

namespace {

template <class T>
using Alloc = memd::RegionAllocator<T>;
using Text = std::basic_string<char, std::char_traits<char>, Alloc<char>>;
using Counts = std::map<Text, int, std::less<>, Alloc<std::pair<const Text, int>>>;
using Numbers = std::vector<long, Alloc<long>>;

// Structures shared by processes need a lock of their own; this one lives in
// the region with them.
struct Shared {
  explicit Shared(memd::Region& r) : counts(Alloc<std::pair<const Text, int>>(r)), numbers(Alloc<long>(r)) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&lock, &a);
  }
  pthread_mutex_t lock;
  Counts counts;
  Numbers numbers;
};

int fail(const char* what, const absl::Status& s) {
  std::fprintf(stderr, "region_tour: %s: %s\n", what, std::string(s.message()).c_str());
  return 1;
}

int worker(const std::string& path, const std::string& sock, int id) {
  auto r = memd::Region::attach(path, memd::Discipline::kFile, sock);
  if (!r.ok()) return fail("attach", r.status());
  memd::Region& region = **r;
  Shared* shared = region.find<Shared>("shared");
  if (shared == nullptr) {
    std::fprintf(stderr, "region_tour: worker %d: no shared root (errno %d)\n", id, errno);
    return 1;
  }
  const char* words[] = {"vam", "vmalloc", "reap", "block", "page", "lease", "region"};
  for (int i = 0; i < 1000; ++i) {
    pthread_mutex_lock(&shared->lock);
    Text w(words[(i + id) % 7], Alloc<char>(region));
    ++shared->counts.try_emplace(std::move(w), 0).first->second;
    shared->numbers.push_back(id * 100000 + i);
    pthread_mutex_unlock(&shared->lock);
  }
  std::printf("worker %d (pid %d): mapped the region at %s address, added 1000 words and numbers\n", id,
              getpid(), region.at_preferred_address() ? "the creator's" : "another");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  std::string path;
  if (argc > 1) {
    path = argv[1];
  } else {
    char tmpl[] = "/tmp/memd-region-tour-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return 1;
    dir = tmpl;
    path = dir + "/tour.region";
  }
  std::string sock = path + ".sock";
  (void)memd::Region::remove(path, memd::Discipline::kFile);

  memd::RegionOptions options;
  options.discipline = memd::Discipline::kFile;
  options.max_bytes = size_t{256} << 20;
  {
    auto r = memd::Region::create(path, options);
    if (!r.ok()) return fail("create", r.status());
    memd::Region& region = **r;
    region.find_or_construct<Shared>("shared", region);
    if (absl::Status s = region.serve(sock); !s.ok()) return fail("serve", s);
    std::printf("owner (pid %d): created %s (%zu MiB reserved), serving leases on %s\n", getpid(), path.c_str(),
                options.max_bytes >> 20, sock.c_str());
    std::fflush(stdout);
    pid_t kids[2];
    for (int id = 0; id < 2; ++id) {
      kids[id] = fork();
      if (kids[id] == 0) {
        int rc = worker(path, sock, id);
        std::fflush(stdout);
        _exit(rc);
      }
    }
    for (pid_t k : kids) {
      int status = 0;
      waitpid(k, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) std::fprintf(stderr, "region_tour: a worker failed\n");
    }
    memd::heap::RegionStats s = region.stat();
    std::printf("owner: %zu live objects, %zu bytes; %zu pages in use, check: %s\n", s.busy_objects, s.busy_bytes,
                s.pages_in_use, region.check().ok() ? "ok" : std::string(region.check().message()).c_str());
  }  // closed: everything written back, marked clean

  auto r = memd::Region::open(path, memd::Discipline::kFile);
  if (!r.ok()) return fail("reopen", r.status());
  memd::Region& region = **r;
  Shared* shared = region.find<Shared>("shared");
  std::printf("reopened (generation %llu): %zu numbers; word counts:", static_cast<unsigned long long>(region.generation()),
              shared->numbers.size());
  for (const auto& [word, n] : shared->counts) std::printf(" %s=%d", word.c_str(), n);
  std::printf("\nroots:");
  for (const memd::RootInfo& root : region.list()) std::printf(" %s (%llu bytes)", root.name.c_str(), static_cast<unsigned long long>(root.size));
  std::printf("\ncheck: %s\n", region.check().ok() ? "ok" : std::string(region.check().message()).c_str());
  r->reset();
  if (!dir.empty()) {
    (void)memd::Region::remove(path, memd::Discipline::kFile);
    rmdir(dir.c_str());
  }
  return 0;
}
