// Failure-atomic publish (Region::reserve / publish / cancel): a reserved
// object belongs to no one until it is published into a link in one step;
// a process that dies first has its reservations freed, one that dies in
// the middle of a publish has it finished; bad calls are refused with a
// message. The killed processes are real children, killed with SIGKILL at
// random instants, and the region is reopened from its file.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "heap/crash_point.h"
#include "region/region.h"
#include "region_test_util.h"

namespace memd {
namespace {

using testing::TempDir;

// Links the children publish into (offset + 1 of the object; 0: none).
struct Links {
  static constexpr int kSlots = 256;
  std::atomic<uint64_t> slot[kSlots];
  std::atomic<uint64_t> steps;
};

// An object that says what it should hold: its size and seed, then a pattern.
void fill(char* p, size_t size, uint64_t seed) {
  std::memcpy(p, &size, 8);
  std::memcpy(p + 8, &seed, 8);
  for (size_t i = 16; i < size; ++i) p[i] = static_cast<char>(seed * 31 + i);
}
bool intact(const char* p) {
  uint64_t size, seed;
  std::memcpy(&size, p, 8);
  std::memcpy(&seed, p + 8, 8);
  if (size < 16 || size > (1u << 20)) return false;
  for (size_t i = 16; i < size; ++i) {
    if (p[i] != static_cast<char>(seed * 31 + i)) return false;
  }
  return true;
}

std::unique_ptr<Region> make_file_region(const std::string& path) {
  auto r = Region::create(path, testing::small_options(Discipline::kFile, size_t{64} << 20));
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return nullptr;
  EXPECT_NE((*r)->find_or_construct<Links>("links"), nullptr);
  return std::move(*r);
}

TEST(Publish, APublishedObjectIsLiveAndItsLinkHoldsTheValue) {
  TempDir dir;
  auto r = make_file_region(dir.file("p.region"));
  ASSERT_NE(r, nullptr);
  Links* links = r->find<Links>("links");
  auto* p = static_cast<char*>(r->reserve(300));
  ASSERT_NE(p, nullptr);
  fill(p, 300, 7);
  uint64_t value = r->offset_of(p) + 1;
  ASSERT_TRUE(r->publish(p, &links->slot[3], value).ok());
  EXPECT_EQ(links->slot[3].load(), value);
  EXPECT_GE(r->size(p), 300u);
  // No longer a reservation: neither published again nor cancelled.
  absl::Status again = r->publish(p, &links->slot[4], value);
  EXPECT_EQ(again.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(again.message().find("no reservation of this process"), std::string::npos) << again;
  EXPECT_EQ(r->cancel(p).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(links->slot[4].load(), 0u);
  EXPECT_TRUE(intact(p));
  EXPECT_TRUE(r->check().ok()) << r->check();
}

TEST(Publish, ACancelledReservationIsFreed) {
  TempDir dir;
  auto r = make_file_region(dir.file("c.region"));
  ASSERT_NE(r, nullptr);
  uint64_t busy = r->stat().busy_objects;
  void* p = r->reserve(64);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(r->cancel(p).ok());
  EXPECT_EQ(r->size(p), 0u);
  // The publish log made at the first reservation is a root of its own.
  EXPECT_EQ(r->stat().busy_objects, busy + 1);
  EXPECT_EQ(r->cancel(p).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Publish, BadCallsAreRefusedWithAMessage) {
  TempDir dir;
  auto r = make_file_region(dir.file("b.region"));
  ASSERT_NE(r, nullptr);
  Links* links = r->find<Links>("links");
  void* plain = r->alloc(64);
  absl::Status s = r->publish(plain, &links->slot[0], 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("no reservation"), std::string::npos) << s;
  void* p = r->reserve(64);
  ASSERT_NE(p, nullptr);
  std::atomic<uint64_t> outside{0};
  s = r->publish(p, &outside, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("no 8-byte word of the region"), std::string::npos) << s;
  auto* misaligned = reinterpret_cast<std::atomic<uint64_t>*>(reinterpret_cast<char*>(&links->slot[0]) + 4);
  EXPECT_EQ(r->publish(p, misaligned, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(outside.load(), 0u);
  // Still a reservation after the refusals.
  EXPECT_TRUE(r->publish(p, &links->slot[0], r->offset_of(p) + 1).ok());
  // Other methods keep no log.
  auto pool = Region::create(dir.file("pool.region"), [] {
    RegionOptions o = testing::small_options(Discipline::kFile);
    o.method = Method::kPool;
    return o;
  }());
  ASSERT_TRUE(pool.ok()) << pool.status();
  errno = 0;
  EXPECT_EQ((*pool)->reserve(64), nullptr);
  EXPECT_EQ(errno, ENOTSUP);
}

TEST(Publish, EveryEntryOfTheLogCanBeHeldAndThenItSaysSo) {
  TempDir dir;
  auto r = make_file_region(dir.file("full.region"));
  ASSERT_NE(r, nullptr);
  std::vector<void*> held;
  for (;;) {
    void* p = r->reserve(32);
    if (p == nullptr) break;
    held.push_back(p);
    ASSERT_LT(held.size(), 10000u);
  }
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_EQ(held.size(), 256u);
  ASSERT_TRUE(r->cancel(held.back()).ok());
  EXPECT_NE(r->reserve(32), nullptr);
}

// --- a process that dies ---

const char* kChildEnv = "MEMD_PUBLISH_CHILD";

// Reserves, fills and publishes objects into random slots, unpublishing
// and freeing what a slot held; or, with `stop_after`, reserves that many,
// publishes the even ones and exits without closing.
int publish_in_a_loop(const std::string& path, uint32_t seed, int stop_after, int ready_fd) {
  // "path@socket": a client of the owner serving on the socket.
  size_t at = path.find('@');
  auto r = at == std::string::npos ? Region::open(path, Discipline::kFile)
                                   : Region::attach(path.substr(0, at), Discipline::kFile, path.substr(at + 1));
  if (!r.ok()) return 10;
  Region& region = **r;
  Links* links = region.find<Links>("links");
  if (links == nullptr) return 11;
  std::mt19937 rng(seed);
  for (int n = 0; stop_after == 0 || n < stop_after; ++n) {
    std::atomic<uint64_t>& link = links->slot[rng() % Links::kSlots];
    if (uint64_t old = link.exchange(0)) region.free(region.at(old - 1));
    size_t size = 16 + rng() % (rng() % 8 == 0 ? 40000 : 600);
    auto* p = static_cast<char*>(region.reserve(size));
    if (p == nullptr) return 12;
    fill(p, size, rng());
    if (stop_after != 0 && n % 2 == 1) continue;  // left reserved
    if (!region.publish(p, &link, region.offset_of(p) + 1).ok()) return 13;
    // Tells the parent it is under way, once.
    if (links->steps.fetch_add(1) == 20 && ready_fd >= 0) {
      char c = 1;
      if (write(ready_fd, &c, 1) != 1) return 14;
    }
  }
  _exit(0);  // no close: as if killed
}

TEST(PublishChild, Run) {
  const char* args = getenv(kChildEnv);
  if (args == nullptr) GTEST_SKIP() << "runs only as the child of the publish tests";
  std::string a(args);
  size_t bar = a.find('|'), bar2 = a.find('|', bar + 1), bar3 = a.find('|', bar2 + 1);
  _exit(publish_in_a_loop(a.substr(0, bar), static_cast<uint32_t>(std::stoul(a.substr(bar + 1, bar2 - bar - 1))),
                          std::stoi(a.substr(bar2 + 1, bar3 - bar2 - 1)), std::stoi(a.substr(bar3 + 1))));
}

// After recovery: every link names a live, intact object; the objects
// live are the published ones, the roots, and at most `in_flight` more.
void expect_published_only(Region& r, uint64_t in_flight) {
  ASSERT_TRUE(r.check().ok()) << r.check();
  Links* links = r.find<Links>("links");
  ASSERT_NE(links, nullptr);
  uint64_t published = 0;
  for (auto& link : links->slot) {
    uint64_t v = link.load();
    if (v == 0) continue;
    ++published;
    auto* p = static_cast<char*>(r.at(v - 1));
    ASSERT_GT(r.size(p), 0u) << "a published object is not live";
    ASSERT_TRUE(intact(p)) << "a published object is not intact";
  }
  uint64_t roots = 2;  // the links and the publish log
  EXPECT_GE(r.stat().busy_objects, published + roots);
  EXPECT_LE(r.stat().busy_objects, published + roots + in_flight);
}

TEST(Publish, ReservationsOfAProcessThatDiedAreFreedAtTheNextOpen) {
  TempDir dir;
  std::string path = dir.file("dead.region");
  { ASSERT_NE(make_file_region(path), nullptr); }
  int status = testing::run_self("PublishChild.*", {std::string(kChildEnv) + "=" + path + "|5|40|-1"});
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  auto r = Region::open(path, Discipline::kFile);
  ASSERT_TRUE(r.ok()) << r.status();
  // 40 reserved, 20 published: the other 20 are freed at the open.
  expect_published_only(**r, 0);
}

// Killed at the two instants a random kill rarely finds: just after a
// reservation is recorded (its object is freed at the open), and between
// the durable intent and the store into the link (the open finishes it).
TEST(Publish, AProcessKilledAtEitherStepOfAPublishIsFinishedOrUndone) {
  for (const char* point : {"publish.reserved:30", "publish.intent:30"}) {
    TempDir dir;
    std::string path = dir.file("point.region");
    { ASSERT_NE(make_file_region(path), nullptr); }
    int status = testing::run_self("PublishChild.*", {std::string(kChildEnv) + "=" + path + "|9|0|-1",
                                                      std::string("MEMD_CRASH_AT=") + point});
    ASSERT_TRUE(WIFEXITED(status)) << status;
    ASSERT_EQ(WEXITSTATUS(status), heap::kCrashExitCode) << point;
    uint64_t published_before = 0;
    {
      auto r = Region::inspect(path, Discipline::kFile);
      ASSERT_TRUE(r.ok()) << r.status();
      for (auto& link : (*r)->find<Links>("links")->slot) published_before += link.load() != 0;
    }
    auto r = Region::open(path, Discipline::kFile);
    ASSERT_TRUE(r.ok()) << r.status();
    uint64_t published_after = 0;
    for (auto& link : (*r)->find<Links>("links")->slot) published_after += link.load() != 0;
    // At the intent, the 30th object's link is stored by the open.
    bool at_intent = std::string(point).find("intent") != std::string::npos;
    EXPECT_EQ(published_after, published_before + (at_intent ? 1 : 0)) << point;
    expect_published_only(**r, 0);
  }
}

TEST(Publish, ReservationsOfAClientThatDiedAreFreedAfterItsReclaim) {
  TempDir dir;
  std::string path = dir.file("client.region");
  auto r = make_file_region(path);
  ASSERT_NE(r, nullptr);
  std::string sock = dir.file("owner.sock");
  ASSERT_TRUE(r->serve(sock).ok());
  int status = testing::run_self("PublishChild.*", {std::string(kChildEnv) + "=" + path + "@" + sock + "|3|40|-1"});
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  // The owner reclaims the client when its connection ends; its 20
  // reservations are then orphans, which compact frees.
  uint64_t published = 0;
  for (auto& link : r->find<Links>("links")->slot) published += link.load() != 0;
  EXPECT_GT(published, 10u);  // 20, less those a later one replaced in the same slot
  ASSERT_TRUE(testing::eventually([&] {
    r->compact();
    return r->stat().busy_objects == published + 2;
  })) << r->stat().busy_objects << " live, " << published << " published";
  expect_published_only(*r, 0);
}

TEST(Publish, AProcessKilledAtRandomInstantsNeverLeavesHalfAPublish) {
  TempDir dir;
  std::string path = dir.file("kill.region");
  { ASSERT_NE(make_file_region(path), nullptr); }
  std::mt19937 rng(std::random_device{}());
  for (int round = 0; round < 12; ++round) {
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    {
      // The count of steps starts again in each child.
      auto r = Region::open(path, Discipline::kFile);
      ASSERT_TRUE(r.ok()) << r.status();
      (*r)->find<Links>("links")->steps.store(0);
    }
    pid_t pid = testing::spawn_self("PublishChild.*", {std::string(kChildEnv) + "=" + path + "|" +
                                                       std::to_string(rng()) + "|0|" + std::to_string(ready[1])});
    ASSERT_GT(pid, 0);
    close(ready[1]);
    // Once it has published some, at a random instant.
    char c = 0;
    ASSERT_EQ(read(ready[0], &c, 1), 1) << "the child did not start publishing";
    close(ready[0]);
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
    kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    auto r = Region::open(path, Discipline::kFile);
    ASSERT_TRUE(r.ok()) << r.status();
    // In flight at a kill: an object unpublished and not yet freed, and one
    // allocated by reserve before its entry named it.
    expect_published_only(**r, 2);
  }
}

TEST(Publish, ABatchPublishesEveryLinkAtOnceAndFreesItsEntries) {
  TempDir dir;
  auto r = make_file_region(dir.file("batch.region"));
  ASSERT_NE(r, nullptr);
  Links* links = r->find<Links>("links");
  for (int round = 0; round < 40; ++round) {  // 40 x 8 entries: each reused many times
    Region::PublishItem items[8];
    for (int i = 0; i < 8; ++i) {
      auto* p = static_cast<char*>(r->reserve(100 + 40 * i));
      ASSERT_NE(p, nullptr);
      fill(p, 100 + 40 * i, round * 8 + i);
      auto& link = links->slot[(round * 8 + i) % Links::kSlots];
      if (uint64_t old = link.exchange(0)) r->free(r->at(old - 1));
      items[i] = {p, &link, r->offset_of(p) + 1};
    }
    ASSERT_TRUE(r->publish(items, 8).ok());
    for (const auto& it : items) {
      EXPECT_EQ(it.link->load(), it.value);
      EXPECT_TRUE(intact(static_cast<char*>(it.object)));
      EXPECT_EQ(r->cancel(it.object).code(), absl::StatusCode::kInvalidArgument) << "no reservation any more";
    }
  }
  expect_published_only(*r, 0);
}

TEST(Publish, ABadBatchPublishesNothingAndSaysWhichItem) {
  TempDir dir;
  auto r = make_file_region(dir.file("bad-batch.region"));
  ASSERT_NE(r, nullptr);
  Links* links = r->find<Links>("links");
  Region::PublishItem items[4];
  for (int i = 0; i < 4; ++i) {
    auto* p = static_cast<char*>(r->reserve(64));
    ASSERT_NE(p, nullptr);
    fill(p, 64, i);
    items[i] = {p, &links->slot[i], r->offset_of(p) + 1};
  }
  void* plain = r->alloc(64);  // not a reservation
  Region::PublishItem bad[4] = {items[0], items[1], {plain, &links->slot[2], 5}, items[3]};
  absl::Status s = r->publish(bad, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("item 2 of the batch"), std::string::npos) << s;
  Region::PublishItem twice[3] = {items[0], items[1], {items[2].object, &links->slot[1], 5}};
  s = r->publish(twice, 3);
  EXPECT_NE(s.message().find("repeats the link of item 1"), std::string::npos) << s;
  EXPECT_EQ(r->publish(items, Region::kMaxPublishBatch + 1).code(), absl::StatusCode::kInvalidArgument);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(links->slot[i].load(), 0u) << "nothing published";
  // The reservations are still this process's: the good batch goes through.
  ASSERT_TRUE(r->publish(items, 4).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(links->slot[i].load(), items[i].value);
  r->free(plain);
  expect_published_only(*r, 0);
}

// The batch child: batches of four into fresh slots, until a crash point
// stops it.
const char* kBatchChildEnv = "MEMD_PUBLISH_BATCH_CHILD";

int publish_batches(const std::string& path) {
  auto r = Region::open(path, Discipline::kFile);
  if (!r.ok()) return 10;
  Region& region = **r;
  Links* links = region.find<Links>("links");
  if (links == nullptr) return 11;
  for (int batch = 0;; ++batch) {
    Region::PublishItem items[4];
    for (int i = 0; i < 4; ++i) {
      auto& link = links->slot[(batch * 4 + i) % Links::kSlots];
      if (uint64_t old = link.exchange(0)) region.free(region.at(old - 1));
      auto* p = static_cast<char*>(region.reserve(64 + 100 * i));
      if (p == nullptr) return 12;
      fill(p, 64 + 100 * i, batch * 4 + i);
      items[i] = {p, &link, region.offset_of(p) + 1};
    }
    if (!region.publish(items, 4).ok()) return 13;
  }
}

TEST(PublishBatchChild, Run) {
  const char* path = getenv(kBatchChildEnv);
  if (path == nullptr) GTEST_SKIP() << "runs only as the child of the batch publish tests";
  _exit(publish_batches(path));
}

// Killed after every entry of a batch was recorded but before the commit,
// the batch is undone (no link, its objects freed); killed after the
// commit, before any link was stored, it is finished (every link).
TEST(Publish, ABatchKilledBeforeItsCommitIsUndoneAndAfterItIsFinished) {
  for (const char* point : {"publish.batch_intent:7", "publish.batch_commit:7"}) {
    TempDir dir;
    std::string path = dir.file("batch-kill.region");
    { ASSERT_NE(make_file_region(path), nullptr); }
    int status = testing::run_self("PublishBatchChild.*", {std::string(kBatchChildEnv) + "=" + path,
                                                           std::string("MEMD_CRASH_AT=") + point});
    ASSERT_TRUE(WIFEXITED(status)) << status;
    ASSERT_EQ(WEXITSTATUS(status), heap::kCrashExitCode) << point;
    auto r = Region::open(path, Discipline::kFile);
    ASSERT_TRUE(r.ok()) << r.status();
    Links* links = (*r)->find<Links>("links");
    uint64_t published = 0;
    for (auto& link : links->slot) published += link.load() != 0;
    // Six batches of four before the seventh.
    bool committed = std::string(point).find("commit") != std::string::npos;
    EXPECT_EQ(published, committed ? 28u : 24u) << point;
    for (int i = 24; i < 28; ++i) EXPECT_EQ(links->slot[i].load() != 0, committed) << point << " slot " << i;
    expect_published_only(**r, 0);
  }
}

}  // namespace
}  // namespace memd
