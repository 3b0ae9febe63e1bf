// The daemon's session table and region registry under concurrency, without
// gRPC in the way (so ThreadSanitizer sees every synchronization): threads
// open and end sessions, attach to regions, lease and give back blocks,
// detach, list and drain, all at once; the region is checked afterwards.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>

#include "region/lease_service.h"
#include "region/region_internals.h"
#include "daemon/catalog.h"
#include "daemon/region_registry.h"
#include "daemon/sessions.h"

namespace memd::daemon {
namespace {

class TempDir {
 public:
  TempDir() {
    std::string t = std::filesystem::temp_directory_path().string() + "/memd-sessions-XXXXXX";
    path = mkdtemp(t.data()) ? t : "";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string path;
};

TEST(Sessions, ConcurrentSessionsLeasesAndDetaches) {
  TempDir dir;
  DaemonConfig config;
  config.data_dir = dir.path + "/data";
  config.shm_namespace = "sessions" + std::to_string(getpid());
  config.region_bytes = 64 << 20;
  Catalog catalog(config.data_dir);
  ASSERT_TRUE(catalog.init().ok());
  RegionRegistry regions(config, &catalog);
  SessionTable sessions(config, &regions);
  Peer me{getpid(), getuid(), getgid()};
  OpenArgs args;
  args.name = "shared";
  args.discipline = Discipline::kShm;
  args.create = true;
  bool created = false;
  absl::StatusOr<std::shared_ptr<ServedRegion>> region = regions.open(args, me, &created);
  ASSERT_TRUE(region.ok()) << region.status();
  ASSERT_TRUE(created);

  constexpr int kThreads = 4, kRounds = 40;
  std::atomic<int> failures{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        v1::Hello hello;
        hello.set_pid(getpid());
        hello.set_start_time(region::process_start_time(getpid()));
        hello.set_client_version(1);
        hello.set_image_id(7);
        v1::Welcome welcome;
        std::atomic<int> drains{0};
        auto s = sessions.open(me, "fd:" + std::to_string(100 + t), hello,
                               [&](const v1::Command&) { drains.fetch_add(1); }, &welcome);
        if (!s.ok()) {
          failures.fetch_add(1);
          continue;
        }
        absl::StatusOr<Attachment> a = sessions.attach(**s, *region, false);
        if (!a.ok()) {
          failures.fetch_add(1);
          sessions.end((*s)->id);
          continue;
        }
        heap::AcquiredBlock blocks[region::kMaxLeaseBatch];
        uint32_t n = 0;
        {
          std::lock_guard<std::mutex> g((*region)->lock);
          uint32_t stash_owner = (*region)->owner->lease_slot(a->slot).stash_owner;
          absl::StatusOr<uint32_t> got = (*region)->leases()->lease(a->slot, heap::PageKind::kSegregated,
                                                                     static_cast<uint16_t>(2 + t), stash_owner, 4,
                                                                     blocks);
          if (got.ok()) n = *got;
        }
        if (n == 0) failures.fetch_add(1);
        // Half the rounds give the blocks back; the others leave them to
        // the detach (or the session's end) to take back.
        if (round % 2 == 0) {
          std::vector<heap::PageIndex> pages;
          for (uint32_t i = 0; i < n; ++i) pages.push_back(blocks[i].first);
          std::lock_guard<std::mutex> g((*region)->lock);
          if (!(*region)->leases()->give_back(a->slot, pages.data(), n).ok()) failures.fetch_add(1);
        }
        // Most rounds detach; the others end the session still attached,
        // leaving an orphaned lease (this process lives on).
        if (round % 8 != 7) {
          if (!sessions.detach(**s, (*region)->handle).ok()) failures.fetch_add(1);
        }
        sessions.end((*s)->id);
      }
    });
  }
  std::thread observer([&] {
    while (!done.load()) {
      for (const auto& s : sessions.list()) (void)sessions.attachments(*s);
      (void)sessions.drain(0, "");
      (void)regions.list();
      std::this_thread::yield();
    }
  });
  for (std::thread& w : workers) w.join();
  done.store(true);
  observer.join();
  EXPECT_EQ(failures.load(), 0);
  // Sessions ended while this process lives: their leases are orphans until
  // it exits (the reaper checks the process), never handed to anyone else,
  // and each still holds the region (it may yet be resumed): the region
  // counts exactly those, one per round that ended attached.
  EXPECT_EQ(sessions.list().size(), 0u);
  uint32_t orphaned = 0;
  for (int round = 0; round < kRounds; ++round) orphaned += round % 8 == 7;
  EXPECT_EQ((*region)->attached.load(), orphaned * kThreads);
  {
    std::lock_guard<std::mutex> g((*region)->lock);
    EXPECT_TRUE((*region)->owner->check().ok());
  }
  regions.close_all(false);
  (void)Region::remove(config.shm_namespace + ".shared", Discipline::kShm);
}

}  // namespace
}  // namespace memd::daemon
