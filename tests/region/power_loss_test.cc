// Power loss between checkpoints, simulated. A process that dies leaves the
// page cache behind, and the file reads as it last wrote it; a power cut
// leaves what the kernel had written back, which may be any mix of the
// pages (on persistent memory: the 64-byte lines) written since the last
// durability barrier, old and new.
//
// The test records the region file at a barrier (a clean close, which
// checkpoints), lets a child process work on the region from there —
// allocating, publishing, unpublishing and freeing objects of every kind,
// from a second thread too (remote frees, on the first thread's blocks) —
// and records the file again at the instant the child stops (no close: as
// if the power went). From the two it builds images: the barrier's bytes
// with a random subset of the units that differ taken from the later state,
// in proportions from a tenth to nine tenths, at the file's length of either
// state (growing the file is metadata the power cut may undo). Each image is opened (which
// recovers it), and must:
//  - open, and pass the region check;
//  - keep every object that was published at the barrier and that nothing
//    freed since (the contract of docs/region-format.md, "Power loss"),
//    intact, live and of its size;
//  - hand out new objects that overlap none of them, and pass the check
//    again after a round of allocations and frees.
// Deterministic by seed: the child's work and every image follow from it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "region/region.h"
#include "power_loss_images.h"
#include "region_test_util.h"

namespace memd {
namespace {

using testing::read_file;
using testing::TempDir;
using testing::write_image;

// Images per (discipline, seed) pair; sanitizer builds run fewer, slower.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kImagesPerSeed = 60;
#else
constexpr int kImagesPerSeed = 400;
#endif
constexpr int kSeeds = 3;
constexpr size_t kRegionBytes = size_t{16} << 20;

// Published objects: the first half of the entries before the barrier, the
// second half by the child after it.
struct Journal {
  static constexpr int kSlots = 1024;
  struct Entry {
    std::atomic<uint64_t> offset;  // object offset + 1, 0: empty
    uint64_t size;
    uint32_t seed;
  };
  Entry entry[kSlots];
};
constexpr int kBefore = Journal::kSlots / 2;


// One step of random work on the entries [first, last): publish a new
// object into an empty entry, or unpublish and free a published one.
bool churn(Region& r, Journal& j, std::mt19937& rng, int first, int last) {
  Journal::Entry& e = j.entry[first + static_cast<int>(rng() % static_cast<uint32_t>(last - first))];
  if (uint64_t off = e.offset.exchange(0); off != 0) {
    r.free(r.at(off - 1));
    return true;
  }
  size_t size = testing::pick_object_size(rng, 240000);
  uint32_t s = static_cast<uint32_t>(rng());
  auto* p = static_cast<char*>(r.alloc(size));
  if (p == nullptr) return false;
  testing::fill_pattern(p, size, s);
  e.size = size;
  e.seed = s;
  e.offset.store(r.offset_of(p) + 1);
  return true;
}

// The child: works on the region after the barrier and stops without a
// close, its last writes in the page cache only.
const char* kChildEnv = "MEMD_POWER_LOSS_CHILD";

int work_after_the_barrier(const std::string& args) {
  size_t a = args.find('|'), b = args.find('|', a + 1);
  auto discipline = static_cast<Discipline>(std::strtol(args.c_str() + a + 1, nullptr, 10));
  uint32_t seed = static_cast<uint32_t>(std::strtoul(args.c_str() + b + 1, nullptr, 10));
  auto r = Region::open(args.substr(0, a), discipline);
  if (!r.ok()) return 10;
  Journal* j = (*r)->find<Journal>("journal");
  if (j == nullptr) return 11;
  std::mt19937 rng(seed);
  // Some of the barrier's objects are freed too: the contract does not
  // cover them, but their frees write the metadata they share.
  for (int i = 0; i < kBefore; i += 16) {
    uint64_t off = j->entry[i].offset.exchange(0);
    if (off != 0) (*r)->free((*r)->at(off - 1));
  }
  // Rounds of work, each followed by a second thread freeing some of the
  // objects the first allocated: remote frees, which go onto the remote
  // lists of blocks the first thread owns, to be collected by it later
  // (or, at the cut, by recovery). Joined each round: deterministic.
  const int rounds = 6;
  const int steps = 1500 + static_cast<int>(rng() % 1500);
  for (int round = 0; round < rounds; ++round) {
    for (int i = 0; i < steps / rounds; ++i) {
      if (!churn(**r, *j, rng, kBefore, Journal::kSlots)) return 12;
    }
    std::thread remote([&, round] {
      std::mt19937 other(seed * 7 + static_cast<uint32_t>(round));
      for (int k = 0; k < 60; ++k) {
        Journal::Entry& e = j->entry[kBefore + static_cast<int>(other() % (Journal::kSlots - kBefore))];
        if (uint64_t off = e.offset.exchange(0); off != 0) (*r)->free((*r)->at(off - 1));
      }
    });
    remote.join();
  }
  _exit(0);  // the power goes: no close, no checkpoint
}

TEST(PowerLossChild, Run) {
  const char* args = getenv(kChildEnv);
  if (args == nullptr) GTEST_SKIP() << "runs only as the child of PowerLossTest";
  _exit(work_after_the_barrier(args));
}

struct PowerLoss {
  Discipline discipline;
  size_t unit;  // what a power cut may leave old or new: a page, or a cache line
  const char* name;
};

class PowerLossTest : public ::testing::TestWithParam<PowerLoss> {};

// The objects published at the barrier that the child left alone.
struct Kept {
  uint64_t offset;
  uint64_t size;
  uint32_t seed;
};

// Opens one image and checks it; an empty string if it passes, else what failed.
std::string check_image(const std::string& path, Discipline d, const std::vector<Kept>& kept, uint32_t seed) {
  auto opened = Region::open(path, d);
  if (!opened.ok()) return "open: " + std::string(opened.status().message());
  Region& r = **opened;
  if (absl::Status s = r.check(); !s.ok()) return "check after recovery: " + std::string(s.message());
  std::map<uint64_t, uint64_t> objects;  // start offset -> end offset
  for (const Kept& k : kept) {
    auto* p = static_cast<char*>(r.at(k.offset));
    if (r.size(p) < k.size) return "an object of the barrier is no longer live, at offset " + std::to_string(k.offset);
    if (!testing::pattern_intact(p, k.size, k.seed)) return "an object of the barrier was overwritten, at offset " + std::to_string(k.offset);
    objects[k.offset] = k.offset + k.size;
  }
  // New objects overlap none of the kept ones, and writing them spoils none.
  std::mt19937 rng(seed);
  std::vector<void*> fresh;
  for (int i = 0; i < 300; ++i) {
    size_t size = testing::pick_object_size(rng, 240000);
    auto* p = static_cast<char*>(r.alloc(size));
    if (p == nullptr) return "an allocation failed after recovery";
    uint64_t lo = r.offset_of(p), hi = lo + size;
    auto next = objects.lower_bound(lo);
    if (next != objects.end() && next->first < hi) return "a new object overlaps one of the barrier";
    if (next != objects.begin() && std::prev(next)->second > lo) return "a new object overlaps one of the barrier";
    std::memset(p, 0x5a, size);
    fresh.push_back(p);
  }
  for (size_t i = 0; i < fresh.size(); i += 2) r.free(fresh[i]);
  for (const Kept& k : kept) {
    if (!testing::pattern_intact(static_cast<char*>(r.at(k.offset)), k.size, k.seed)) return "new objects overwrote one of the barrier";
  }
  if (absl::Status s = r.check(); !s.ok()) return "check after new work: " + std::string(s.message());
  return "";
}

TEST_P(PowerLossTest, EveryImageRecoversWithTheBarriersObjectsIntact) {
  const PowerLoss& param = GetParam();
  int images = 0, differing_units_seen = 0;
  const testing::SeedRange seeds = testing::power_loss_seeds(kSeeds);
  for (uint32_t seed = seeds.first; seed <= seeds.last; ++seed) {
    // In memory where there is a tmpfs: the images are the page cache's
    // business, and each close's msync to a disk would be most of the time.
    TempDir dir(access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR"));
    ASSERT_FALSE(dir.path().empty());
    std::string path = dir.file("power.region");
    std::vector<Kept> kept;
    {
      // The state at the barrier: objects of every kind published, some
      // freed (free lists and free runs between them), a clean close.
      auto r = Region::create(path, testing::small_options(param.discipline, kRegionBytes));
      ASSERT_TRUE(r.ok()) << r.status();
      Journal* j = (*r)->find_or_construct<Journal>("journal");
      ASSERT_NE(j, nullptr);
      std::mt19937 rng(seed * 7919);
      for (int i = 0; i < 3 * kBefore; ++i) ASSERT_TRUE(churn(**r, *j, rng, 0, kBefore));
    }
    std::string barrier = read_file(path);
    {
      auto r = Region::open(path, param.discipline);
      ASSERT_TRUE(r.ok()) << r.status();
      Journal* j = (*r)->find<Journal>("journal");
      ASSERT_NE(j, nullptr);
      for (int i = 0; i < kBefore; ++i) {
        // The child frees every 16th entry's object (work_after_the_barrier).
        uint64_t off = j->entry[i].offset.load();
        if (off != 0 && i % 16 != 0) kept.push_back({off - 1, j->entry[i].size, j->entry[i].seed});
      }
    }
    ASSERT_GT(kept.size(), 100u);
    std::string args = path + "|" + std::to_string(static_cast<int>(param.discipline)) + "|" + std::to_string(seed);
    int status = testing::run_self("PowerLossChild.*", {std::string(kChildEnv) + "=" + args});
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    std::string after = read_file(path);
    // A file region grows as its heap uses pages (pmem ones are made at
    // their whole reservation). A power cut may leave the file at either
    // length: its new length reached the disk or not. What lies past the
    // barrier's length read as zero (holes) then.
    const size_t barrier_length = barrier.size();
    ASSERT_GE(after.size(), barrier_length);
    if (param.discipline == Discipline::kPmem) {
      ASSERT_EQ(after.size(), barrier_length);
    }
    barrier.resize(after.size(), '\0');
    std::vector<size_t> differing;
    for (size_t at = 0; at < after.size(); at += param.unit) {
      size_t n = std::min(param.unit, after.size() - at);
      if (std::memcmp(barrier.data() + at, after.data() + at, n) != 0) differing.push_back(at);
    }
    ASSERT_FALSE(differing.empty());
    differing_units_seen += static_cast<int>(differing.size());
    std::string image_path = dir.file("image.region");
    for (int i = 0; i < kImagesPerSeed; ++i) {
      std::mt19937 rng(seed * 1000003u + static_cast<uint32_t>(i));
      uint32_t tenths = 1 + static_cast<uint32_t>(i % 9);  // the share of units that reached the disk
      std::string image = barrier;
      for (size_t at : differing) {
        if (rng() % 10 < tenths) std::memcpy(image.data() + at, after.data() + at, std::min(param.unit, after.size() - at));
      }
      if (rng() % 2 == 0) image.resize(barrier_length);  // the growth did not reach the disk
      ASSERT_TRUE(write_image(image_path, image));
      std::string failure = check_image(image_path, param.discipline, kept, seed * 31 + static_cast<uint32_t>(i));
      if (!failure.empty()) testing::keep_failed_image(image);
      ASSERT_EQ(failure, "") << "seed " << seed << ", image " << i << " (" << tenths << "/10 of "
                             << differing.size() << " units of " << param.unit << " bytes new)";
      ++images;
    }
  }
  EXPECT_EQ(images, static_cast<int>(seeds.count()) * kImagesPerSeed);
  EXPECT_GT(differing_units_seen, static_cast<int>(seeds.count()) * 10);
}

INSTANTIATE_TEST_SUITE_P(Units, PowerLossTest,
                         ::testing::Values(PowerLoss{Discipline::kFile, 4096, "FilePages"},
                                           PowerLoss{Discipline::kPmem, 64, "PmemLines"}),
                         [](const ::testing::TestParamInfo<PowerLoss>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace memd
