// The shared disciplines against real objects and real processes: shm
// objects in /dev/shm, files and pmem files in a temporary directory, and
// forked children that map the same object.
#include "disciplines/shared_source.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "../support/small_file_systems.h"

namespace memd::disciplines {

// Test names and ctest listings show the kind, not its bytes (found by ADL,
// so outside the anonymous namespace).
void PrintTo(DisciplineKind kind, std::ostream* os) {
  static const char* const kNames[] = {"Anonymous", "Shm", "File", "Pmem"};
  auto i = static_cast<uint32_t>(kind);
  *os << (i < 4 ? kNames[i] : "Unknown");
}

namespace {

// pmem must work on an ordinary file system as it is, not because libpmem
// was told to pretend (it reads this variable lazily, at its first use).
const bool kPmemForceCleared = [] {
  unsetenv("PMEM_IS_PMEM_FORCE");
  return true;
}();

constexpr size_t kPage = kSharedPageSize;

std::string kind_name(DisciplineKind kind) {
  switch (kind) {
    case DisciplineKind::kShm: return "Shm";
    case DisciplineKind::kFile: return "File";
    case DisciplineKind::kPmem: return "Pmem";
    case DisciplineKind::kAnonymous: return "Anonymous";
  }
  return "Unknown";
}

// A directory of its own under $TMPDIR (or /tmp), removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* tmp = getenv("TMPDIR");
    std::string tmpl = absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/memd-shared-XXXXXX");
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data()) != nullptr) path_ = buf.data();
  }
  ~TempDir() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Names unique to this run: the pid and a counter.
std::string unique_region_name() {
  static std::atomic<int> counter{0};
  return absl::StrCat("test-", getpid(), "-", counter.fetch_add(1));
}

// Deletes an object when the test ends, whatever happened to it.
class ObjectGuard {
 public:
  ObjectGuard(DisciplineKind kind, std::string name) : kind_(kind), name_(std::move(name)) {}
  ~ObjectGuard() { (void)remove_shared(kind_, name_); }

 private:
  DisciplineKind kind_;
  std::string name_;
};

std::string describe_wait(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  return absl::StrCat("wait status ", status);
}

// A forked child and two one-way pipes to step parent and child in turn.
// The child's body returns its exit code; it must not use gtest assertions.
class Child {
 public:
  template <class Body>
  explicit Child(Body body) {
    if (pipe(to_child_) != 0 || pipe(to_parent_) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      in_child_ = true;
      close(to_child_[1]);
      close(to_parent_[0]);
      _exit(body(*this));
    }
    close(to_child_[0]);
    close(to_parent_[1]);
  }
  ~Child() {
    if (pid_ > 0 && !waited_) wait();
    close(in_child_ ? to_child_[0] : to_child_[1]);
    close(in_child_ ? to_parent_[1] : to_parent_[0]);
  }
  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

  // Tells the other side to go on.
  void send(char c = 'g') {
    ssize_t n = write(in_child_ ? to_parent_[1] : to_child_[1], &c, 1);
    (void)n;
  }
  // Waits (at most 30 s) for the other side; false on timeout or EOF.
  bool receive() {
    int fd = in_child_ ? to_child_[0] : to_parent_[0];
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 30000) != 1) return false;
    char c;
    return read(fd, &c, 1) == 1;
  }
  int wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    waited_ = true;
    return status;
  }

 private:
  int to_child_[2] = {-1, -1};
  int to_parent_[2] = {-1, -1};
  pid_t pid_ = -1;
  bool in_child_ = false;
  bool waited_ = false;
};

#define CHILD_CHECK(cond)                                                            \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "child check failed at line %d: %s\n", __LINE__, #cond); \
      return 100 + __LINE__ % 100;                                                   \
    }                                                                                \
  } while (0)

#define EXPECT_CHILD_OK(status) EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << describe_wait(status)

// Events seen by a source, recorded without allocating.
struct EventLog {
  static constexpr int kMax = 32;
  SourceEventInfo events[kMax];
  int count = 0;
  static void record(void* context, const SourceEventInfo& info) {
    auto* log = static_cast<EventLog*>(context);
    if (log->count < kMax) log->events[log->count++] = info;
  }
  int count_of(SourceEvent e) const {
    return static_cast<int>(std::count_if(events, events + count, [e](const SourceEventInfo& i) { return i.event == e; }));
  }
  const SourceEventInfo* last(SourceEvent e) const {
    for (int i = count - 1; i >= 0; --i) {
      if (events[i].event == e) return &events[i];
    }
    return nullptr;
  }
};

size_t blocks_of(const SharedSource& s, DisciplineKind kind, const std::string& name) {
  std::string path = kind == DisciplineKind::kShm ? "/dev/shm/memd." + name : name;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return ~size_t{0};
  return static_cast<size_t>(st.st_blocks);
}

// ---------------------------------------------------------------------------
// Names and limits (no objects needed)

TEST(SharedNamesTest, RegionNamesFollowTheRules) {
  for (const char* good : {"a", "region-1", "A.b_c-9", "x.y.z"}) {
    EXPECT_TRUE(validate_region_name(good).ok()) << good;
  }
  // The shm object "memd.<name>" is one file name (NAME_MAX): 250 fit, and
  // a daemon's namespace prefix may take part of them.
  EXPECT_TRUE(validate_region_name(std::string(250, 'r')).ok());
  struct Bad {
    std::string name;
    const char* says;
  };
  for (const Bad& bad : {Bad{"", "empty"}, Bad{"a/b", "character"}, Bad{"..", "starts with '.'"},
                         Bad{".x", "starts with '.'"}, Bad{"a..b", "\"..\""}, Bad{"a b", "character"},
                         Bad{std::string("a\0b", 3), "character"}, Bad{std::string(251, 'r'), "251"}}) {
    absl::Status s = validate_region_name(bad.name);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad.name;
    EXPECT_NE(s.message().find(bad.says), std::string::npos) << s;
  }
}

TEST(SharedNamesTest, PathsMustBeNonEmptyWithoutNul) {
  EXPECT_TRUE(validate_path("/tmp/x").ok());
  EXPECT_TRUE(validate_path("relative").ok());
  EXPECT_EQ(validate_path("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(validate_path(std::string("a\0b", 3)).code(), absl::StatusCode::kInvalidArgument);
}

TEST(SharedNamesTest, OpenRejectsBadNamesAndTheAnonymousKind) {
  SharedSourceOptions create{.length = kPage, .create = true};
  for (const char* bad : {"a/b", "..", "", ".x"}) {
    auto s = SharedSource::open(DisciplineKind::kShm, bad, create);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(SharedSource::open(DisciplineKind::kFile, "", create).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedSource::open(DisciplineKind::kAnonymous, "x", create).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(remove_shared(DisciplineKind::kShm, "a/b").code(), absl::StatusCode::kInvalidArgument);
}

TEST(SharedNamesTest, LimitIsTheFileSystemSizeCappedAtOneTebibyte) {
  struct statvfs fs;
  ASSERT_EQ(statvfs("/dev/shm", &fs), 0);
  size_t shm_total = std::min<size_t>(size_t{fs.f_blocks} * fs.f_frsize, kMaxSharedObject);
  auto shm = discipline_limit(DisciplineKind::kShm, "anything");
  ASSERT_TRUE(shm.ok()) << shm.status();
  EXPECT_EQ(*shm, shm_total);

  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  ASSERT_EQ(statvfs(dir.path().c_str(), &fs), 0);
  auto file = discipline_limit(DisciplineKind::kFile, dir.path() + "/obj");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*file, std::min<size_t>(size_t{fs.f_blocks} * fs.f_frsize, kMaxSharedObject));

  auto missing = discipline_limit(DisciplineKind::kFile, dir.path() + "/no/such/obj");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  EXPECT_EQ(discipline_limit(DisciplineKind::kAnonymous, "x").status().code(), absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------
// Every shared kind

class SharedSourceTest : public ::testing::TestWithParam<DisciplineKind> {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.path().empty()) << "mkdtemp failed: " << strerror(errno); }

  // A fresh name for the kind under test, deleted when the test ends.
  std::string fresh_name() {
    std::string name = GetParam() == DisciplineKind::kShm ? unique_region_name()
                                                          : dir_.path() + "/" + unique_region_name();
    guards_.emplace_back(std::make_unique<ObjectGuard>(GetParam(), name));
    return name;
  }
  std::unique_ptr<SharedSource> create(const std::string& name, size_t length) {
    auto s = SharedSource::open(GetParam(), name, {.length = length, .create = true});
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }
  std::unique_ptr<SharedSource> open_existing(const std::string& name, bool read_only = false) {
    auto s = SharedSource::open(GetParam(), name, {.read_only = read_only});
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }

  TempDir dir_;
  std::vector<std::unique_ptr<ObjectGuard>> guards_;
};

TEST_P(SharedSourceTest, CreatesSparseThenOpensReadsAndMaps) {
  const std::string name = fresh_name();
  auto owner = create(name, 16 * kPage);
  ASSERT_NE(owner, nullptr);
  EXPECT_TRUE(owner->created());
  EXPECT_EQ(owner->kind(), GetParam());
  EXPECT_EQ(owner->name(), name);
  EXPECT_EQ(owner->length(), 16 * kPage);
  EXPECT_EQ(blocks_of(*owner, GetParam(), name), 0u) << "a new object is sparse";
  EXPECT_EQ(owner->base(), nullptr);

  ASSERT_TRUE(owner->map().ok());
  ASSERT_NE(owner->base(), nullptr);
  EXPECT_EQ(owner->reserved_bytes(), 16 * kPage);
  EXPECT_EQ(owner->map().code(), absl::StatusCode::kFailedPrecondition) << "mapped twice";
  ASSERT_TRUE(owner->commit(0, kPage)) << strerror(errno);
  std::memcpy(owner->base(), "memd-header", 12);
  EXPECT_TRUE(owner->persist(0, 12)) << strerror(errno);
  EXPECT_TRUE(owner->persist(100, 5000)) << "rounded out to pages";
  EXPECT_TRUE(owner->persist(0, 16 * kPage));
  if (GetParam() == DisciplineKind::kPmem) {
    std::printf("pmem file in %s: is_pmem=%d\n", dir_.path().c_str(), owner->is_pmem());
  } else {
    EXPECT_FALSE(owner->is_pmem());
  }

  auto other = open_existing(name);
  ASSERT_NE(other, nullptr);
  EXPECT_FALSE(other->created());
  char header[12] = {};
  ASSERT_TRUE(other->read(0, header, sizeof header).ok());
  EXPECT_STREQ(header, "memd-header");
  absl::Status past = other->read(16 * kPage - 4, header, 8);
  EXPECT_EQ(past.code(), absl::StatusCode::kOutOfRange) << past;
  ASSERT_TRUE(other->map().ok());
  EXPECT_STREQ(other->base(), "memd-header");
  EXPECT_NE(other->base(), owner->base());
}

TEST_P(SharedSourceTest, ExistingAndMissingObjects) {
  const std::string name = fresh_name();
  auto missing = SharedSource::open(GetParam(), name, {});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  EXPECT_EQ(remove_shared(GetParam(), name).code(), absl::StatusCode::kNotFound);

  auto first = create(name, kPage);
  ASSERT_NE(first, nullptr);
  auto again = SharedSource::open(GetParam(), name, {.length = kPage, .create = true});
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists) << again.status();
  EXPECT_NE(again.status().message().find(GetParam() == DisciplineKind::kShm ? "/memd." + name : name),
            std::string::npos)
      << again.status();

  EXPECT_TRUE(remove_shared(GetParam(), name).ok());
  EXPECT_EQ(SharedSource::open(GetParam(), name, {}).status().code(), absl::StatusCode::kNotFound);
  // A process that still has it open keeps using it.
  ASSERT_TRUE(first->map().ok());
  EXPECT_TRUE(first->commit(0, kPage));
}

TEST_P(SharedSourceTest, RejectsBadLengthsAndLeavesNothingBehind) {
  const std::string name = fresh_name();
  for (size_t length : {size_t{0}, kPage + 1, size_t{100}}) {
    auto s = SharedSource::open(GetParam(), name, {.length = length, .create = true});
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << length << ": " << s.status();
  }
  auto limit = discipline_limit(GetParam(), name);
  ASSERT_TRUE(limit.ok()) << limit.status();
  auto over = SharedSource::open(GetParam(), name, {.length = *limit + kPage, .create = true});
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(over.status().message().find(absl::StrCat("limit of ", *limit)), std::string::npos) << over.status();
  EXPECT_EQ(SharedSource::open(GetParam(), name, {}).status().code(), absl::StatusCode::kNotFound)
      << "a refused create must not leave an object";
  auto read_only_create = SharedSource::open(GetParam(), name, {.length = kPage, .create = true, .read_only = true});
  EXPECT_EQ(read_only_create.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(SharedSourceTest, ReadOnlyRefusesEveryWrite) {
  const std::string name = fresh_name();
  auto owner = create(name, 4 * kPage);
  ASSERT_NE(owner, nullptr);
  ASSERT_TRUE(owner->map().ok());
  ASSERT_TRUE(owner->commit(0, kPage));
  owner->base()[0] = 42;

  auto reader = open_existing(name, /*read_only=*/true);
  ASSERT_NE(reader, nullptr);
  EXPECT_TRUE(reader->read_only());
  errno = 0;
  EXPECT_FALSE(reader->commit(0, kPage));
  EXPECT_EQ(errno, EROFS);
  ASSERT_TRUE(reader->map().ok());
  EXPECT_EQ(reader->base()[0], 42);
  errno = 0;
  EXPECT_FALSE(reader->commit(kPage, kPage));
  EXPECT_EQ(errno, EROFS);
  errno = 0;
  EXPECT_FALSE(reader->discard(0, kPage));
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(owner->base()[0], 42) << "the refused discard left the data";
  EXPECT_EQ(reader->lock_owner().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(reader->is_pmem());

  // The mapping itself is read-only: a store kills the process.
  Child writer([&](Child&) {
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGSEGV, &dfl, nullptr);  // no sanitizer report, just the signal
    reader->base()[0] = 1;
    return 0;
  });
  ASSERT_TRUE(writer.started());
  int status = writer.wait();
  EXPECT_TRUE(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0)) << describe_wait(status);
  EXPECT_EQ(owner->base()[0], 42);
}

TEST_P(SharedSourceTest, PermissionDenied) {
  if (geteuid() == 0) GTEST_SKIP() << "running as root: permission bits do not stop root (EACCES untestable)";
  const std::string name = fresh_name();
  auto s = SharedSource::open(GetParam(), name, {.length = kPage, .create = true, .mode = 0});
  ASSERT_TRUE(s.ok()) << s.status();
  auto denied = SharedSource::open(GetParam(), name, {});
  EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied) << denied.status();
}

TEST_P(SharedSourceTest, ChildSeesCommittedPagesWithoutRemapping) {
  const std::string name = fresh_name();
  constexpr size_t kLength = 256 * kPage;
  auto owner = create(name, kLength);
  ASSERT_NE(owner, nullptr);
  ASSERT_TRUE(owner->map().ok());
  const DisciplineKind kind = GetParam();

  // The child maps the object while nothing is committed, then waits.
  Child child([&](Child& self) {
    auto mine = SharedSource::open(kind, name, {});
    CHILD_CHECK(mine.ok());
    CHILD_CHECK((*mine)->map().ok());
    char* base = (*mine)->base();
    self.send();
    CHILD_CHECK(self.receive());
    for (size_t i = 0; i < 16 * kPage; ++i) CHILD_CHECK(base[64 * kPage + i] == static_cast<char>(i * 7));
    CHILD_CHECK((*mine)->base() == base && (*mine)->reserved_bytes() == kLength);
    // And the child's own writes reach the owner.
    std::memcpy(base + 64 * kPage, "from-child", 11);
    return 0;
  });
  ASSERT_TRUE(child.started());
  ASSERT_TRUE(child.receive());
  ASSERT_TRUE(owner->commit(64 * kPage, 16 * kPage)) << strerror(errno);
  for (size_t i = 0; i < 16 * kPage; ++i) owner->base()[64 * kPage + i] = static_cast<char>(i * 7);
  child.send();
  EXPECT_CHILD_OK(child.wait());
  EXPECT_STREQ(owner->base() + 64 * kPage, "from-child");
}

TEST_P(SharedSourceTest, DiscardPunchesHolesSeenByEveryMapper) {
  const std::string name = fresh_name();
  constexpr size_t kLength = 256 * kPage;
  auto owner = create(name, kLength);
  ASSERT_NE(owner, nullptr);
  ASSERT_TRUE(owner->map().ok());
  ASSERT_TRUE(owner->commit(0, 128 * kPage));
  std::memset(owner->base(), 0x5a, 128 * kPage);
  ASSERT_TRUE(owner->persist(0, 128 * kPage));
  const size_t before = blocks_of(*owner, GetParam(), name);
  EXPECT_GE(before, 128 * kPage / 512);
  const DisciplineKind kind = GetParam();

  Child child([&](Child& self) {
    auto mine = SharedSource::open(kind, name, {});
    CHILD_CHECK(mine.ok());
    CHILD_CHECK((*mine)->map().ok());
    const char* base = (*mine)->base();
    CHILD_CHECK(base[0] == 0x5a && base[128 * kPage - 1] == 0x5a);
    self.send();
    CHILD_CHECK(self.receive());  // the owner discarded [32, 96) pages
    for (size_t i = 32 * kPage; i < 96 * kPage; ++i) CHILD_CHECK(base[i] == 0);
    CHILD_CHECK(base[32 * kPage - 1] == 0x5a && base[96 * kPage] == 0x5a);
    self.send();
    CHILD_CHECK(self.receive());  // the owner committed again and wrote
    CHILD_CHECK(base[32 * kPage] == 0x11 && base[96 * kPage - 1] == 0x11);
    return 0;
  });
  ASSERT_TRUE(child.started());
  ASSERT_TRUE(child.receive());
  ASSERT_TRUE(owner->discard(32 * kPage, 64 * kPage)) << strerror(errno);
  const size_t after = blocks_of(*owner, GetParam(), name);
  EXPECT_LE(after + 64 * kPage / 512, before) << "the object's blocks drop by the discarded pages";
  for (size_t i = 32 * kPage; i < 96 * kPage; i += kPage) ASSERT_EQ(owner->base()[i], 0);
  child.send();
  ASSERT_TRUE(child.receive());
  ASSERT_TRUE(owner->commit(32 * kPage, 64 * kPage)) << "commit after discard: " << strerror(errno);
  EXPECT_GE(blocks_of(*owner, GetParam(), name), before - 1);
  std::memset(owner->base() + 32 * kPage, 0x11, 64 * kPage);
  child.send();
  EXPECT_CHILD_OK(child.wait());
}

TEST_P(SharedSourceTest, RefusesRangesOutsideTheObject) {
  const std::string name = fresh_name();
  auto s = create(name, 4 * kPage);
  ASSERT_NE(s, nullptr);
  errno = 0;
  EXPECT_FALSE(s->commit(0, kPage)) << "not mapped yet";
  EXPECT_EQ(errno, EINVAL);
  EventLog log;
  s->set_event_handler(&EventLog::record, &log);
  ASSERT_TRUE(s->map().ok());
  errno = 0;
  EXPECT_FALSE(s->commit(4 * kPage, kPage));
  EXPECT_EQ(errno, ENOMEM);
  errno = 0;
  EXPECT_FALSE(s->commit(100, kPage));
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_FALSE(s->discard(2 * kPage, 4 * kPage));
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_FALSE(s->persist(3 * kPage, 2 * kPage));
  EXPECT_EQ(log.count_of(SourceEvent::kBadAddress), 4);
  EXPECT_TRUE(s->commit(0, 0));
  EXPECT_TRUE(s->persist(0, 0));
}

TEST_P(SharedSourceTest, FiresOpenAndCloseEvents) {
  const std::string name = fresh_name();
  EventLog log;
  {
    auto s = create(name, 8 * kPage);
    ASSERT_NE(s, nullptr);
    s->set_event_handler(&EventLog::record, &log);
    ASSERT_TRUE(s->map().ok());
    ASSERT_EQ(log.count_of(SourceEvent::kOpen), 1);
    EXPECT_EQ(log.last(SourceEvent::kOpen)->length, 8 * kPage);
    EXPECT_NE(log.last(SourceEvent::kOpen)->what, nullptr);
    EXPECT_EQ(log.count_of(SourceEvent::kClose), 0);
  }
  ASSERT_EQ(log.count_of(SourceEvent::kClose), 1);
  EXPECT_EQ(log.last(SourceEvent::kClose)->length, 8 * kPage);
  EXPECT_EQ(log.events[log.count - 1].event, SourceEvent::kClose);

  // Never mapped: nothing to close.
  EventLog unmapped;
  {
    auto s = open_existing(name);
    ASSERT_NE(s, nullptr);
    s->set_event_handler(&EventLog::record, &unmapped);
  }
  EXPECT_EQ(unmapped.count, 0);
}

TEST_P(SharedSourceTest, MapsAtTheHintWhenItIsFree) {
  const std::string name = fresh_name();
  auto first = create(name, 8 * kPage);
  ASSERT_NE(first, nullptr);
  // An address known to be free: reserve a span, then let it go.
  void* span = mmap(nullptr, 8 * kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(span, MAP_FAILED);
  munmap(span, 8 * kPage);
  ASSERT_TRUE(first->map(span).ok());
  if (GetParam() == DisciplineKind::kPmem) {
    EXPECT_FALSE(first->at_hint()) << "libpmem chooses the address";
    return;
  }
  EXPECT_TRUE(first->at_hint());
  EXPECT_EQ(first->base(), span);
  // The same hint again is taken: the second mapping goes elsewhere.
  auto second = open_existing(name);
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(second->map(span).ok());
  EXPECT_FALSE(second->at_hint());
  EXPECT_NE(second->base(), span);
  EXPECT_EQ(first->base(), span) << "the first mapping was not replaced";
  // Without a hint there is nothing to be at.
  auto third = open_existing(name);
  ASSERT_TRUE(third->map().ok());
  EXPECT_FALSE(third->at_hint());
}

// A forked child holds its parent's mapping at the hint; mapping the same
// object there again takes it over, at the same address.
TEST_P(SharedSourceTest, AForkedChildMapsOverItsInheritedMapping) {
  if (GetParam() == DisciplineKind::kPmem) GTEST_SKIP() << "libpmem chooses the address";
  const std::string name = fresh_name();
  auto first = create(name, 8 * kPage);
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(first->map().ok());
  ASSERT_TRUE(first->commit(0, 8 * kPage));
  std::memcpy(first->base(), "parent", 7);
  char* at = first->base();
  pid_t pid = fork();
  if (pid == 0) {
    auto again = SharedSource::open(GetParam(), name, {});
    if (!again.ok() || !(*again)->map(at).ok()) _exit(10);
    if (!(*again)->at_hint() || (*again)->base() != at) _exit(11);
    if (std::memcmp(at, "parent", 7) != 0) _exit(12);
    std::memcpy(at, "child", 6);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_STREQ(first->base(), "child");
}

TEST_P(SharedSourceTest, OnlyOneOwnerAtATime) {
  const std::string name = fresh_name();
  auto owner = create(name, kPage);
  ASSERT_NE(owner, nullptr);
  ASSERT_TRUE(owner->lock_owner().ok());
  const DisciplineKind kind = GetParam();
  const pid_t parent = getpid();

  Child rival([&](Child&) {
    auto mine = SharedSource::open(kind, name, {});
    CHILD_CHECK(mine.ok());
    absl::Status s = (*mine)->lock_owner();
    CHILD_CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
    CHILD_CHECK(s.message().find("already has an owner") != std::string::npos);
    CHILD_CHECK(s.message().find(absl::StrCat("(pid ", parent, ")")) != std::string::npos);
    return 0;
  });
  ASSERT_TRUE(rival.started());
  EXPECT_CHILD_OK(rival.wait());

  owner.reset();  // the owner goes away: the lock goes with its descriptor
  Child successor([&](Child&) {
    auto mine = SharedSource::open(kind, name, {});
    CHILD_CHECK(mine.ok());
    CHILD_CHECK((*mine)->lock_owner().ok());
    return 0;
  });
  ASSERT_TRUE(successor.started());
  EXPECT_CHILD_OK(successor.wait());
}

// ---------------------------------------------------------------------------
// A full file system: commit fails up front, nothing raises SIGBUS

// In the child, on a 1 MiB file system: one object takes all the space, a
// second one's commit fails with ENOMEM and kNoMemory(ENOSPC), and works once
// the first gives its pages back.
int fill_and_overflow(DisciplineKind kind, const std::string& dir) {
  constexpr size_t kMiB = 1 << 20;
  const std::string a = kind == DisciplineKind::kShm ? unique_region_name() : dir + "/" + unique_region_name();
  const std::string b = kind == DisciplineKind::kShm ? unique_region_name() : dir + "/" + unique_region_name();
  auto limit = discipline_limit(kind, a);
  CHILD_CHECK(limit.ok() && *limit == kMiB);
  auto over = SharedSource::open(kind, a, {.length = 2 * kMiB, .create = true});
  CHILD_CHECK(over.status().code() == absl::StatusCode::kInvalidArgument);

  auto first = SharedSource::open(kind, a, {.length = kMiB, .create = true});
  CHILD_CHECK(first.ok());
  CHILD_CHECK((*first)->map().ok());
  CHILD_CHECK((*first)->commit(0, kMiB));
  std::memset((*first)->base(), 0x77, kMiB);  // every committed byte is writable

  auto second = SharedSource::open(kind, b, {.length = kMiB, .create = true});
  CHILD_CHECK(second.ok());
  EventLog log;
  (*second)->set_event_handler(&EventLog::record, &log);
  CHILD_CHECK((*second)->map().ok());
  errno = 0;
  CHILD_CHECK(!(*second)->commit(0, 16 * kPage));
  CHILD_CHECK(errno == ENOMEM);
  CHILD_CHECK(log.count_of(SourceEvent::kNoMemory) == 1);
  const SourceEventInfo* nomem = log.last(SourceEvent::kNoMemory);
  CHILD_CHECK(nomem->error == ENOSPC && nomem->offset == 0 && nomem->length == 16 * kPage);

  CHILD_CHECK((*first)->discard(0, kMiB / 2));
  CHILD_CHECK((*second)->commit(0, 16 * kPage));
  std::memset((*second)->base(), 0x33, 16 * kPage);
  CHILD_CHECK(remove_shared(kind, a).ok() && remove_shared(kind, b).ok());
  return 0;
}

TEST(SharedFullFileSystemTest, CommitFailsWithENOMEMInsteadOfSigbus) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  int reason_pipe[2];
  ASSERT_EQ(pipe(reason_pipe), 0);
  constexpr int kSkip = 77;
  Child child([&](Child&) {
    close(reason_pipe[0]);
    std::string why = memd::testing::enter_small_file_systems({dir.path(), "/dev/shm"}, "1m");
    if (!why.empty()) {
      ssize_t n = write(reason_pipe[1], why.data(), why.size());
      (void)n;
      return kSkip;
    }
    for (DisciplineKind kind : {DisciplineKind::kShm, DisciplineKind::kFile, DisciplineKind::kPmem}) {
      if (int rc = fill_and_overflow(kind, dir.path()); rc != 0) {
        std::fprintf(stderr, "failed for %s\n", kind_name(kind).c_str());
        return rc;
      }
    }
    return 0;
  });
  close(reason_pipe[1]);
  ASSERT_TRUE(child.started());
  int status = child.wait();
  char why[512] = {};
  ssize_t n = read(reason_pipe[0], why, sizeof why - 1);
  close(reason_pipe[0]);
  (void)n;
  if (WIFEXITED(status) && WEXITSTATUS(status) == kSkip) GTEST_SKIP() << why;
  ASSERT_FALSE(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS) << "SIGBUS on a full file system";
  EXPECT_CHILD_OK(status);
}

INSTANTIATE_TEST_SUITE_P(Kinds, SharedSourceTest,
                         ::testing::Values(DisciplineKind::kShm, DisciplineKind::kFile, DisciplineKind::kPmem),
                         [](const auto& info) { return kind_name(info.param); });

}  // namespace
}  // namespace memd::disciplines
