// Standard containers built with RegionAllocator inside a region, read and
// changed by other processes: vector and basic_string from a process that
// maps the region at another address, map and unordered_map from a fresh
// process (spawned) that maps it at the creator's address and from a forked
// one that takes over the mapping it inherited. And all of them again
// after the file region is closed and reopened.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "region/region.h"
#include "region/region_allocator.h"
#include "region/region_internals.h"
#include "region_test_util.h"

extern char** environ;

namespace memd {
namespace {

template <class T>
using Alloc = RegionAllocator<T>;
using String = std::basic_string<char, std::char_traits<char>, Alloc<char>>;
using IntVector = std::vector<int, Alloc<int>>;
using StringVector = std::vector<String, Alloc<String>>;
using Map = std::map<int, String, std::less<int>, Alloc<std::pair<const int, String>>>;
struct StringHash {
  size_t operator()(const String& s) const { return std::hash<std::string_view>()(std::string_view(s)); }
};
using HashMap = std::unordered_map<String, int, StringHash, std::equal_to<String>, Alloc<std::pair<const String, int>>>;

String str(Region& r, const std::string& s) { return String(s.c_str(), Alloc<char>(r)); }

// Builds the containers in `r`.
void build(Region& r) {
  auto* v = r.find_or_construct<IntVector>("ints", Alloc<int>(r));
  for (int i = 0; i < 1000; ++i) v->push_back(i * i);
  auto* s = r.find_or_construct<String>("text", Alloc<char>(r));
  s->assign("a string much longer than any small-string buffer, kept in the region");
  auto* sv = r.find_or_construct<StringVector>("strings", Alloc<String>(r));
  for (int i = 0; i < 100; ++i) sv->push_back(str(r, "item " + std::to_string(i) + std::string(i, '#')));
  auto* m = r.find_or_construct<Map>("map", std::less<int>(), Alloc<std::pair<const int, String>>(r));
  for (int i = 0; i < 500; ++i) m->emplace(i, str(r, "value " + std::to_string(i) + std::string(30, '.')));
  auto* h = r.find_or_construct<HashMap>("hash", 16, StringHash(), std::equal_to<String>(),
                                         Alloc<std::pair<const String, int>>(r));
  for (int i = 0; i < 500; ++i) h->emplace(str(r, "key " + std::to_string(i) + std::string(20, '-')), i);
}

// What another process reads and changes. Returns an error code, 0 if fine.
int read_and_change_sequences(Region& r) {
  auto* v = r.find<IntVector>("ints");
  auto* s = r.find<String>("text");
  auto* sv = r.find<StringVector>("strings");
  if (!v || !s || !sv) return 1;
  if (v->size() != 1000 || (*v)[999] != 999 * 999) return 2;
  if (*s != "a string much longer than any small-string buffer, kept in the region") return 3;
  if (sv->size() != 100 || (*sv)[42] != str(r, "item 42" + std::string(42, '#'))) return 4;
  for (int i = 0; i < 5000; ++i) v->push_back(-i);  // reallocates, through this process's mapping
  s->append(" and more");
  sv->push_back(str(r, "from the child, long enough to leave the small buffer"));
  return 0;
}

int read_and_change_nodes(Region& r) {
  auto* m = r.find<Map>("map");
  auto* h = r.find<HashMap>("hash");
  if (!m || !h) return 11;
  if (m->size() != 500 || m->at(321) != str(r, "value 321" + std::string(30, '.'))) return 12;
  if (h->size() != 500 || h->at(str(r, "key 77" + std::string(20, '-'))) != 77) return 13;
  for (int i = 500; i < 1500; ++i) m->emplace(i, str(r, "child " + std::to_string(i)));
  m->erase(0);
  for (int i = 500; i < 1500; ++i) h->emplace(str(r, "child key " + std::to_string(i)), i);  // rehashes
  h->erase(str(r, "key 1" + std::string(20, '-')));
  return 0;
}

void check_changed(Region& r) {
  auto* v = r.find<IntVector>("ints");
  ASSERT_NE(v, nullptr);
  ASSERT_EQ(v->size(), 6000u);
  EXPECT_EQ((*v)[999], 999 * 999);
  EXPECT_EQ((*v)[5999], -4999);
  EXPECT_EQ(*r.find<String>("text"), "a string much longer than any small-string buffer, kept in the region and more");
  EXPECT_EQ(r.find<StringVector>("strings")->back(), "from the child, long enough to leave the small buffer");
  auto* m = r.find<Map>("map");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->size(), 1499u);
  EXPECT_EQ(m->count(0), 0u);
  EXPECT_EQ(m->at(1234), "child 1234");
  auto* h = r.find<HashMap>("hash");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->size(), 1499u);
  EXPECT_EQ(h->at(str(r, "child key 999")), 999);
}

const char* kChildEnv = "MEMD_CONTAINERS_CHILD";

// Runs in a fresh process (posix_spawn of this test binary): its address
// space has nothing at the region's preferred address.
TEST(ContainersChild, ChangesNodeContainers) {
  const char* args = getenv(kChildEnv);
  if (args == nullptr) GTEST_SKIP() << "runs only as the child of ContainersTest";
  std::string a(args);
  size_t bar = a.find('|');
  auto r = Region::attach(a.substr(0, bar), Discipline::kFile, a.substr(bar + 1));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE((*r)->at_preferred_address());
  ASSERT_EQ(read_and_change_nodes(**r), 0);
}

TEST(ContainersTest, SharedAcrossProcessesAndRestarts) {
  testing::TempDir dir;
  std::string name = dir.file("containers.region");
  std::string sock = dir.file("owner.sock");
  {
    auto r = Region::create(name, testing::small_options(Discipline::kFile));
    ASSERT_TRUE(r.ok()) << r.status();
    Region& region = **r;
    ASSERT_TRUE(region.at_preferred_address());
    build(region);
    ASSERT_TRUE(region.serve(sock).ok());

    // vector and strings: a forked child that maps the region elsewhere:
    // it replaces the mapping it inherited with an unrelated one, so the
    // preferred address is taken.
    pid_t pid = fork();
    if (pid == 0) {
      size_t len = RegionInternals::of(region)->source->reserved_bytes();
      void* blocker = mmap(region.base(), len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
      if (blocker != region.base()) _exit(22);
      auto c = Region::attach(name, Discipline::kFile, sock);
      if (!c.ok()) _exit(20);
      if ((*c)->at_preferred_address()) _exit(21);
      _exit(read_and_change_sequences(**c));
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0);

    // A forked child maps over the mapping it inherited: the same address,
    // so node containers work there too.
    pid = fork();
    if (pid == 0) {
      auto c = Region::attach(name, Discipline::kFile, sock);
      if (!c.ok()) _exit(30);
      if (!(*c)->at_preferred_address()) _exit(31);
      Map* m = (*c)->find<Map>("map");
      if (m == nullptr || m->at(7) != str(**c, "value 7" + std::string(30, '.'))) _exit(32);
      m->emplace(-1, str(**c, "from a forked child"));
      _exit(0);
    }
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0);
    ASSERT_EQ(region.find<Map>("map")->at(-1), "from a forked child");
    region.find<Map>("map")->erase(-1);

    // map and unordered_map: a fresh process at the same address.
    status = testing::run_self("ContainersChild.*", {std::string(kChildEnv) + "=" + name + "|" + sock});
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0);

    check_changed(region);
    EXPECT_TRUE(region.check().ok()) << region.check();
  }
  // After a restart, everything is where it was.
  auto r = Region::open(name, Discipline::kFile);
  ASSERT_TRUE(r.ok()) << r.status();
  check_changed(**r);
  // Destroying the containers frees everything they held.
  (*r)->destroy<IntVector>("ints");
  (*r)->destroy<String>("text");
  (*r)->destroy<StringVector>("strings");
  (*r)->destroy<Map>("map");
  (*r)->destroy<HashMap>("hash");
  EXPECT_EQ((*r)->stat().busy_objects, 0u);
  EXPECT_TRUE((*r)->check().ok()) << (*r)->check();
}

}  // namespace
}  // namespace memd
