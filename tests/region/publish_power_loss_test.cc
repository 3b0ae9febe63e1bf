// Power cuts in the middle of failure-atomic publishes (Region::publish), at
// the instant of every persist. tests/region/power_loss_test.cc cuts between
// checkpoints; this test follows the medium through each msync a file
// region makes. It defines msync itself (the memd library linked into it
// calls this one), which makes the call and then takes the pages it
// covered as what the medium now holds. At a random half of the calls it
// records a cut: the medium's pages, the pages that differ in memory (the
// kernel may or may not have written them back), and what the test had
// published by then. From each cut it builds images — the medium with a
// random subset of the differing pages — and each must open and:
//  - pass the region check;
//  - hold every link whose publish (or retirement) returned before the cut,
//    naming its object, live and intact;
//  - hold the link being published or retired at the cut either as it was
//    or as it was being made, never anything else, an object it names
//    intact: nothing published is lost or half-visible;
//  - hand out new objects over none of the linked ones, and pass the check
//    again after them.
// Deterministic by seed: the work, the cuts and the images follow from it.
// Reservations of large sizes take whole pages (ThreadHeap::alloc_recoverable),
// so the objects here are segregated and huge ones of every size class.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "power_loss_images.h"
#include "region/region.h"
#include "region_test_util.h"

namespace memd {
namespace {

using testing::TempDir;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kImagesPerCut = 1;
#else
constexpr int kImagesPerCut = 3;
#endif
constexpr int kSeeds = 4;
constexpr int kOperations = 120;
constexpr size_t kPage = 4096;

// The links the test publishes into: offset + 1 of the object, 0: none.
struct Slots {
  static constexpr int kCount = 48;
  std::atomic<uint64_t> link[kCount];
};

// What a link should hold, and its object's size and pattern.
struct Expected {
  uint64_t value = 0;
  uint64_t size = 0;
  uint32_t seed = 0;
};

// What the test has published: every link as its last publish or
// retirement left it, and the one in flight, if any, as it will be.
struct Published {
  std::array<Expected, Slots::kCount> settled{};
  int in_flight = -1;
  Expected becoming;
};

// One instant a power cut may hit: what the medium held, what else memory
// held that may or may not have reached it, and what was published.
struct Cut {
  std::map<size_t, std::string> medium;     // pages that differ from the barrier's file
  std::map<size_t, std::string> unwritten;  // pages memory holds otherwise, at the cut
  size_t length = 0;
  Published published;
};

// The medium of one region file, as the msyncs made it.
class Medium {
 public:
  Medium(std::string barrier, const std::string& path, const char* base, const Published* published, uint32_t seed)
      : barrier_(std::move(barrier)), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)), base_(base),
        published_(published), rng_(seed) {}
  ~Medium() { ::close(fd_); }

  // After msync(address, length) returned: its pages are on the medium.
  void synced(const char* address, size_t length) {
    if (address < base_) return;
    size_t from = static_cast<size_t>(address - base_) & ~(kPage - 1);
    size_t end = static_cast<size_t>(address - base_) + length;
    for (size_t at = from; at < end; at += kPage) medium_[at] = page_now(at);
    if (rng_() % 2 == 0) cut();
  }

  std::vector<Cut>& cuts() { return cuts_; }
  int fd() const { return fd_; }

 private:
  std::string page_now(size_t at) const {
    std::string page(kPage, '\0');
    ssize_t n = ::pread(fd_, page.data(), kPage, static_cast<off_t>(at));
    if (n < 0) n = 0;
    std::memset(page.data() + n, 0, kPage - static_cast<size_t>(n));
    return page;
  }
  std::string page_on_medium(size_t at) const {
    if (auto it = medium_.find(at); it != medium_.end()) return it->second;
    std::string page(kPage, '\0');
    if (at < barrier_.size()) std::memcpy(page.data(), barrier_.data() + at, std::min(kPage, barrier_.size() - at));
    return page;
  }
  void cut() {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return;
    Cut c;
    c.length = static_cast<size_t>(st.st_size);
    c.medium = medium_;
    c.published = *published_;
    for (size_t at = 0; at < c.length; at += kPage) {
      std::string now = page_now(at);
      if (now != page_on_medium(at)) c.unwritten.emplace(at, std::move(now));
    }
    cuts_.push_back(std::move(c));
  }

  std::string barrier_;
  int fd_;
  const char* base_;
  const Published* published_;
  std::mt19937 rng_;
  std::map<size_t, std::string> medium_;
  std::vector<Cut> cuts_;
};

std::atomic<Medium*> medium{nullptr};

// The image of one cut: the barrier's file, the medium's pages, and each
// page memory held otherwise with chance tenths / 10.
std::string image_of(const std::string& barrier, const Cut& c, std::mt19937& rng, uint32_t tenths) {
  std::string image = barrier;
  image.resize(c.length, '\0');
  auto put = [&](size_t at, const std::string& page) {
    if (at < image.size()) std::memcpy(image.data() + at, page.data(), std::min(kPage, image.size() - at));
  };
  for (const auto& [at, page] : c.medium) put(at, page);
  for (const auto& [at, page] : c.unwritten) {
    if (rng() % 10 < tenths) put(at, page);
  }
  return image;
}

// Opens one image and checks it; an empty string if it passes, else what failed.
std::string check_image(const std::string& path, const Published& published, uint32_t seed) {
  auto opened = Region::open(path, Discipline::kFile);
  if (!opened.ok()) return "open: " + std::string(opened.status().message());
  Region& r = **opened;
  if (absl::Status s = r.check(); !s.ok()) return "check after recovery: " + std::string(s.message());
  Slots* slots = r.find<Slots>("slots");
  if (slots == nullptr) return "the slots root is gone";
  std::map<uint64_t, uint64_t> objects;  // start offset -> end offset
  for (int i = 0; i < Slots::kCount; ++i) {
    uint64_t value = slots->link[i].load();
    const Expected* want = &published.settled[i];
    if (value != want->value) {
      if (published.in_flight != i || value != published.becoming.value) {
        return "link " + std::to_string(i) + " holds " + std::to_string(value) + ", expected " +
               std::to_string(want->value) +
               (published.in_flight == i ? " or " + std::to_string(published.becoming.value) : std::string());
      }
      want = &published.becoming;
    }
    if (value == 0) continue;
    auto* p = static_cast<char*>(r.at(value - 1));
    if (r.size(p) < want->size) {
      return "the object of link " + std::to_string(i) + " (offset " + std::to_string(value - 1) + ", " +
             std::to_string(want->size) + " bytes" + (published.in_flight == i ? ", in flight" : "") + ") is not live";
    }
    if (!testing::pattern_intact(p, want->size, want->seed)) return "the object of link " + std::to_string(i) + " is not intact";
    objects[value - 1] = value - 1 + want->size;
  }
  std::mt19937 rng(seed);
  for (int i = 0; i < 200; ++i) {
    size_t size = testing::pick_object_size(rng, 90000);
    auto* p = static_cast<char*>(r.alloc(size));
    if (p == nullptr) return "an allocation failed after recovery";
    uint64_t lo = r.offset_of(p), hi = lo + size;
    auto next = objects.lower_bound(lo);
    if ((next != objects.end() && next->first < hi) || (next != objects.begin() && std::prev(next)->second > lo)) {
      uint64_t other = next != objects.end() && next->first < hi ? next->first : std::prev(next)->first;
      return "a new object (offset " + std::to_string(lo) + ", " + std::to_string(size) +
             " bytes) overlaps a linked one (offset " + std::to_string(other) + ", " +
             std::to_string(objects[other] - other) + " bytes)";
    }
    std::memset(p, 0x5a, size);
    if (i % 2 == 0) r.free(p);
  }
  if (absl::Status s = r.check(); !s.ok()) return "check after new work: " + std::string(s.message());
  return "";
}

// Publishes into empty links, retires full ones (the link cleared durably,
// then the object freed) and allocates and frees objects nobody publishes,
// with every msync watched by `m`.
void work(Region& r, Slots& slots, Published& published, uint32_t seed, std::vector<void*>& loose) {
  std::mt19937 rng(seed);
  for (int op = 0; op < kOperations; ++op) {
    int slot = static_cast<int>(rng() % Slots::kCount);
    uint32_t kind = rng() % 8;
    if (kind < 5 && published.settled[slot].value == 0) {
      size_t size = testing::pick_object_size(rng, 90000);
      auto* p = static_cast<char*>(r.reserve(size));
      ASSERT_NE(p, nullptr) << std::strerror(errno);
      uint32_t pattern = rng();
      testing::fill_pattern(p, size, pattern);
      published.becoming = {r.offset_of(p) + 1, size, pattern};
      published.in_flight = slot;
      ASSERT_TRUE(r.publish(p, &slots.link[slot], r.offset_of(p) + 1).ok());
      published.settled[slot] = published.becoming;
      published.in_flight = -1;
    } else if (kind < 6 && published.settled[slot].value != 0) {
      void* p = r.at(published.settled[slot].value - 1);
      published.becoming = {};
      published.in_flight = slot;
      slots.link[slot].store(0);
      ASSERT_TRUE(r.persist(&slots.link[slot], sizeof slots.link[slot]).ok());
      published.settled[slot] = {};
      published.in_flight = -1;
      r.free(p);
    } else {
      for (int i = 0; i < 4; ++i) loose.push_back(r.alloc(testing::pick_object_size(rng, 90000)));
      while (loose.size() > 12) {
        size_t i = rng() % loose.size();
        r.free(loose[i]);
        loose.erase(loose.begin() + static_cast<ptrdiff_t>(i));
      }
    }
  }
}

TEST(PublishPowerLoss, EveryCutLeavesEachLinkWholeAndItsObjectIntact) {
  int images = 0;
  size_t cuts_seen = 0, cuts_in_flight = 0;
  const testing::SeedRange seeds = testing::power_loss_seeds(kSeeds);
  for (uint32_t seed = seeds.first; seed <= seeds.last; ++seed) {
    TempDir dir(access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR"));
    ASSERT_FALSE(dir.path().empty());
    std::string path = dir.file("publish.region");
    {
      auto r = Region::create(path, testing::small_options(Discipline::kFile, size_t{16} << 20));
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_NE((*r)->find_or_construct<Slots>("slots"), nullptr);
    }
    // The barrier: a clean close, checkpointed.
    std::string barrier = testing::read_file(path);
    Published published;
    std::vector<Cut> cuts;
    {
      auto r = Region::open(path, Discipline::kFile);
      ASSERT_TRUE(r.ok()) << r.status();
      Slots* slots = (*r)->find<Slots>("slots");
      ASSERT_NE(slots, nullptr);
      Medium m(barrier, path, (*r)->base(), &published, seed * 7919);
      ASSERT_GE(m.fd(), 0);
      std::vector<void*> loose;
      medium.store(&m);
      work(**r, *slots, published, seed, loose);
      medium.store(nullptr);
      cuts = std::move(m.cuts());
      for (void* p : loose) (*r)->free(p);
    }
    ASSERT_GT(cuts.size(), 20u);
    cuts_seen += cuts.size();
    std::string image_path = dir.file("image.region");
    for (size_t c = 0; c < cuts.size(); ++c) {
      if (cuts[c].published.in_flight >= 0) ++cuts_in_flight;
      for (int i = 0; i < kImagesPerCut; ++i) {
        std::mt19937 rng(seed * 1000003u + static_cast<uint32_t>(c * 31 + i));
        uint32_t tenths = static_cast<uint32_t>(rng() % 11);  // the share of unwritten pages that reached the disk
        std::string image = image_of(barrier, cuts[c], rng, tenths);
        ASSERT_TRUE(testing::write_image(image_path, image));
        std::string failure = check_image(image_path, cuts[c].published, seed * 31 + static_cast<uint32_t>(i));
        if (!failure.empty()) testing::keep_failed_image(image);
        ASSERT_EQ(failure, "") << "seed " << seed << ", cut " << c << " of " << cuts.size() << ", image " << i << " ("
                               << tenths << "/10 of " << cuts[c].unwritten.size() << " unwritten pages)";
        ++images;
      }
    }
  }
  std::printf("%d images of %zu cuts (%zu inside a publish or a retirement), %u seeds\n", images, cuts_seen,
              cuts_in_flight, seeds.count());
  EXPECT_GT(images, static_cast<int>(seeds.count()) * 20 * kImagesPerCut);
  // Most cuts fall inside a publish or a retirement: that is what is tested.
  EXPECT_GT(cuts_in_flight, size_t{seeds.count()} * 20);
}

}  // namespace
}  // namespace memd

// The library's persists of a file region, watched: the real call, then
// the medium told.
extern "C" int msync(void* address, size_t length, int flags) {
  int rc = static_cast<int>(::syscall(SYS_msync, address, length, flags));
  if (memd::Medium* m = memd::medium.load(std::memory_order_acquire); m != nullptr && rc == 0) {
    m->synced(static_cast<const char*>(address), length);
  }
  return rc;
}
