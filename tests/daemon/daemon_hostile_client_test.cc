// The daemon against clients that lie or sabotage, through the real daemon:
// raw sessions that are not libmemd (they send what memd::Client never
// would), real client processes killed at random instants, backing objects
// truncated under the daemon. Each test is one defect of issue 14; after
// every one the daemon still serves an honest client and its regions pass
// `check`.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "heap/layout.h"
#include "tests/daemon/raw_session.h"
#include "tests/daemon/test_util.h"

namespace memd {
namespace {

using namespace memd::testing;

constexpr uint32_t kSmallClass = 2;

v1::OpenRegionRequest open_request(const std::string& name, v1::Discipline d = v1::DISCIPLINE_SHM) {
  v1::OpenRegionRequest r;
  r.set_name(name);
  r.set_discipline(d);
  r.set_create(true);
  r.set_max_bytes(64 << 20);
  r.set_mode(0666);
  return r;
}

struct Opened {
  uint32_t handle = 0;
  uint32_t stash = 0;
  std::string object;
};

Opened open_region(RawSession& s, const std::string& name, v1::Discipline d = v1::DISCIPLINE_SHM) {
  v1::OpenRegionResponse resp;
  grpc::Status st = s.open(open_request(name, d), &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return {resp.handle(), resp.stash_owner(), resp.object_path()};
}

grpc::Status lease(RawSession& s, const Opened& r, uint32_t count, std::vector<uint32_t>* pages) {
  grpc::ClientContext c;
  RawSession::deadline(&c);
  v1::LeaseRequest req;
  req.set_session(s.id);
  req.set_region(r.handle);
  req.set_kind(v1::BLOCK_SEGREGATED);
  req.set_size_class(kSmallClass);
  req.set_owner(r.stash);
  req.set_count(count);
  v1::LeaseResponse resp;
  grpc::Status st = s.leases->Lease(&c, req, &resp);
  for (const auto& b : resp.blocks()) pages->push_back(b.page());
  return st;
}

grpc::Status release(RawSession& s, const Opened& r, const std::vector<uint32_t>& pages) {
  grpc::ClientContext c;
  RawSession::deadline(&c);
  v1::ReleaseRequest req;
  req.set_session(s.id);
  req.set_region(r.handle);
  for (uint32_t p : pages) req.add_pages(p);
  v1::ReleaseResponse resp;
  return s.leases->Release(&c, req, &resp);
}

grpc::Status lease_run(RawSession& s, const Opened& r, uint32_t pages, uint32_t* page) {
  grpc::ClientContext c;
  RawSession::deadline(&c);
  v1::LeaseRunRequest req;
  req.set_session(s.id);
  req.set_region(r.handle);
  req.set_pages(pages);
  v1::LeaseRunResponse resp;
  grpc::Status st = s.leases->LeaseRun(&c, req, &resp);
  *page = resp.run().page();
  return st;
}

grpc::Status release_run(RawSession& s, const Opened& r, uint32_t page) {
  grpc::ClientContext c;
  RawSession::deadline(&c);
  v1::ReleaseRunRequest req;
  req.set_session(s.id);
  req.set_region(r.handle);
  req.set_page(page);
  v1::ReleaseRunResponse resp;
  return s.leases->ReleaseRun(&c, req, &resp);
}

grpc::Status resize_run(RawSession& s, const Opened& r, uint32_t page, uint32_t pages) {
  grpc::ClientContext c;
  RawSession::deadline(&c);
  v1::ResizeRunRequest req;
  req.set_session(s.id);
  req.set_region(r.handle);
  req.set_page(page);
  req.set_pages(pages);
  v1::ResizeRunResponse resp;
  return s.leases->ResizeRun(&c, req, &resp);
}

v1::CheckResult check(RawSession& s, const std::string& region) {
  grpc::ClientContext c;
  RawSession::deadline(&c);
  v1::CheckRequest req;
  req.set_region(region);
  v1::CheckResponse resp;
  grpc::Status st = s.admin->Check(&c, req, &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return resp.results_size() > 0 ? resp.results(0) : v1::CheckResult{};
}

grpc::Status compact(RawSession& s, const std::string& region) {
  grpc::ClientContext c;
  RawSession::deadline(&c);
  v1::CompactRequest req;
  req.set_region(region);
  v1::CompactResponse resp;
  return s.admin->Compact(&c, req, &resp);
}

// The region's object mapped into this process, as a raw client could.
struct Mapping {
  void* base = MAP_FAILED;
  size_t len = 0;
  heap::Region view;
  Mapping(const std::string& path, size_t length) : len(length) {
    int fd = open(path.c_str(), O_RDWR);
    if (fd < 0) return;
    base = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base != MAP_FAILED) view = heap::Region::attach(static_cast<char*>(base));
  }
  ~Mapping() {
    if (base != MAP_FAILED) munmap(base, len);
  }
};

std::string shm_path(const DaemonProcess& d, const std::string& name) {
  return "/dev/shm/memd." + d.shm_namespace() + "." + name;
}

class DaemonHostileClient : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(d.running()) << d.log(); }
  void TearDown() override {
    // Whatever was tried, the daemon still serves an honest client.
    EXPECT_EQ(run_client(d, {}, {"afterwards", "fill", "1", "100", "32"}), 0) << d.log();
    EXPECT_EQ(run_client(d, {}, {"afterwards", "verify", "1", "100", "32"}), 0);
    EXPECT_EQ(kill(d.pid(), 0), 0) << "the daemon died\n" << d.log();
  }
  DaemonProcess d;
};

// Issue 14.2 and 14.3: a release naming blocks the caller never leased
// (abandoned ones, another client's) used to be accepted: the block went
// onto the abandoned list a second time (a cycle), two clients adopted it,
// and the lease count wrapped below zero.
TEST_F(DaemonHostileClient, ReleaseOfBlocksNotLeasedToTheCallerChangesNothing) {
  // An honest client fills blocks and is killed: they are abandoned.
  pid_t victim = start_client(d, {}, {"shared", "hold", "1", "2000", "24"}, d.dir() + "/victim.log");
  bool ready = eventually([&] { return read_file(d.dir() + "/victim.log").find("ready") != std::string::npos; });
  kill(victim, SIGKILL);
  wait_exit(victim);
  ASSERT_TRUE(ready);

  RawSession a(d.socket());
  RawSession b(d.socket());
  ASSERT_NE(a.id, 0u);
  ASSERT_NE(b.id, 0u);
  Opened ra = open_region(a, "shared");
  Opened rb = open_region(b, "shared");
  std::vector<uint32_t> mine;
  ASSERT_TRUE(lease(a, ra, 4, &mine).ok());
  ASSERT_FALSE(mine.empty());

  // B names every page of the region, one release each: none is B's.
  uint32_t accepted = 0;
  for (uint32_t p = 0; p < 600; ++p) accepted += release(b, rb, {p}).ok();
  EXPECT_EQ(accepted, 0u);
  // A's own block, named by B: PERMISSION_DENIED, and A still holds it.
  grpc::Status st = release(b, rb, {mine[0]});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  // A batch with one foreign block is refused whole.
  st = release(a, ra, {mine[1], mine[0] + 100000});
  EXPECT_FALSE(st.ok());
  // The same block twice in one batch.
  st = release(a, ra, {mine[1], mine[1]});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();

  v1::RegionInfo info;
  ASSERT_TRUE(a.stat("shared", &info).ok());
  EXPECT_EQ(info.blocks_leased(), mine.size());
  // Honest releases still work, once: a repeat is refused.
  EXPECT_TRUE(release(a, ra, mine).ok());
  st = release(a, ra, {mine[0]});
  EXPECT_FALSE(st.ok());
  ASSERT_TRUE(a.stat("shared", &info).ok());
  EXPECT_EQ(info.blocks_leased(), 0u);

  // The abandoned list holds each block once: compact and check finish.
  EXPECT_TRUE(compact(a, "shared").ok());
  v1::CheckResult c = check(a, "shared");
  EXPECT_TRUE(c.ok()) << c.message();
  // The victim's objects are adopted by one client at a time: a new one
  // verifies them all while another allocates.
  EXPECT_EQ(run_client(d, {}, {"shared", "verify", "1", "2000", "24"}), 0);
}

// Issue 14.2 (huge runs), and the retry of issue 15.1: a run is released or
// resized only by a process that claimed it; a repeated release after the
// run went to another client changes nothing.
TEST_F(DaemonHostileClient, HugeRunsAreReleasedOnlyByTheirClaimer) {
  RawSession a(d.socket());
  RawSession b(d.socket());
  Opened ra = open_region(a, "runs");
  Opened rb = open_region(b, "runs");
  Mapping m(shm_path(d, "runs"), 64 << 20);
  ASSERT_NE(m.base, MAP_FAILED);

  uint32_t run = 0;
  ASSERT_TRUE(lease_run(a, ra, 512, &run).ok());
  // Live (unclaimed): nobody may release or resize it.
  grpc::Status st = release_run(b, rb, run);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
  EXPECT_EQ(release_run(a, ra, run).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(resize_run(b, rb, run, 1024).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  // A claims it (as a free does): B still may not release it.
  std::atomic<uint32_t>& word = m.view.block(heap::PageIndex{run}).owner_word;
  uint32_t expected = 0;
  ASSERT_TRUE(word.compare_exchange_strong(expected, ra.stash << 1));
  st = release_run(b, rb, run);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_TRUE(release_run(a, ra, run).ok());
  // B is given the same pages; A's release, repeated (a retry after a lost
  // answer), must not free B's run.
  uint32_t again = 0;
  ASSERT_TRUE(lease_run(b, rb, 512, &again).ok());
  ASSERT_EQ(again, run);
  EXPECT_FALSE(release_run(a, ra, run).ok());
  uint32_t third = 0;
  ASSERT_TRUE(lease_run(a, ra, 512, &third).ok());
  EXPECT_NE(third, run) << "one run handed to two clients";
  v1::CheckResult c = check(a, "runs");
  EXPECT_TRUE(c.ok()) << c.message();
}

// Issue 14.1: any user who can write a region's object could truncate it
// and kill the daemon with SIGBUS at the next Stat, Check, Compact, scrape
// or lease. Now the region is marked damaged and says why; others go on.
TEST_F(DaemonHostileClient, TruncatedBackingDamagesOnlyThatRegion) {
  RawSession s(d.socket());
  ASSERT_NE(s.id, 0u);
  ASSERT_EQ(run_client(d, {}, {"bystander", "fill", "1", "500", "40"}), 0);
  for (v1::Discipline disc : {v1::DISCIPLINE_SHM, v1::DISCIPLINE_FILE}) {
    std::string name = disc == v1::DISCIPLINE_SHM ? "cut-shm" : "cut-file";
    Opened r = open_region(s, name, disc);
    std::vector<uint32_t> pages;
    ASSERT_TRUE(lease(s, r, 8, &pages).ok());
    std::string path = disc == v1::DISCIPLINE_SHM ? shm_path(d, name) : r.object;
    ASSERT_EQ(truncate(path.c_str(), 4096), 0) << path;

    v1::RegionInfo info;
    grpc::Status st = s.stat(name, &info);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_NE(info.damage().find("truncated"), std::string::npos) << info.damage();
    std::vector<uint32_t> more;
    st = lease(s, r, 1, &more);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
    EXPECT_NE(st.error_message().find("damaged"), std::string::npos) << st.error_message();
    v1::CheckResult c = check(s, name);
    EXPECT_FALSE(c.ok());
    EXPECT_NE(c.message().find("damaged"), std::string::npos) << c.message();
    EXPECT_TRUE(compact(s, "").ok());
    // Opening it again says why; it cannot be created anew while listed.
    v1::OpenRegionResponse resp;
    RawSession other(d.socket());
    EXPECT_EQ(other.open(open_request(name, disc), &resp).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }
  ASSERT_EQ(kill(d.pid(), 0), 0) << d.log();
  EXPECT_EQ(run_client(d, {}, {"bystander", "verify", "1", "500", "40"}), 0);
  EXPECT_TRUE(check(s, "bystander").ok());
}

// A process that may write a region wrote garbage over the header's fields
// fixed at creation (its identity, geometry and table offsets). The daemon
// puts them back from the copy it took at open, says so, and serves the
// region on, where it used to mark it damaged for good.
TEST_F(DaemonHostileClient, AnOverwrittenHeaderIsRestoredAndTheRegionServedOn) {
  RawSession s(d.socket());
  ASSERT_NE(s.id, 0u);
  for (v1::Discipline disc : {v1::DISCIPLINE_SHM, v1::DISCIPLINE_FILE}) {
    std::string name = disc == v1::DISCIPLINE_SHM ? "scrawl-shm" : "scrawl-file";
    Opened r = open_region(s, name, disc);
    std::vector<uint32_t> pages;
    ASSERT_TRUE(lease(s, r, 8, &pages).ok());
    Mapping m(disc == v1::DISCIPLINE_SHM ? shm_path(d, name) : r.object, 4096);
    ASSERT_NE(m.base, MAP_FAILED);
    char* h = static_cast<char*>(m.base);
    std::vector<char> saved(h, h + 128);
    std::memset(h, 0x5a, 128);  // magic, version, page size, geometry, table offsets
    std::vector<uint32_t> more;
    grpc::Status st = lease(s, r, 1, &more);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(std::memcmp(h, saved.data(), saved.size()), 0) << "the header was not restored";
    v1::RegionInfo info;
    st = s.stat(name, &info);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(info.damage(), "");
    v1::CheckResult c = check(s, name);
    EXPECT_TRUE(c.ok()) << c.message();
  }
  EXPECT_NE(d.log().find("its header was overwritten; restored from the daemon's copy"), std::string::npos) << d.log();
  ASSERT_EQ(kill(d.pid(), 0), 0) << d.log();
}

// Issue 14.1 at start: a region whose object was truncated while the daemon
// was down is listed as damaged (not only logged), and can be removed and
// made again.
TEST_F(DaemonHostileClient, ARegionDamagedAtStartIsListedAndRemovable) {
  ASSERT_EQ(run_client(d, {"--file"}, {"broken", "fill", "1", "100", "32"}), 0);
  ASSERT_EQ(run_client(d, {}, {"fine", "fill", "1", "100", "32"}), 0);
  std::string path;
  {
    RawSession s(d.socket());
    v1::RegionInfo info;
    ASSERT_TRUE(s.stat("broken", &info).ok());
    path = info.object_path();
  }
  ASSERT_EQ(d.stop(), 0);
  ASSERT_EQ(truncate(path.c_str(), 8192), 0);
  d.start();
  ASSERT_TRUE(d.running()) << d.log();
  RawSession s(d.socket());
  v1::RegionInfo info;
  ASSERT_TRUE(s.stat("broken", &info).ok());
  EXPECT_FALSE(info.damage().empty());
  grpc::ClientContext c;
  RawSession::deadline(&c);
  v1::ListRegionsRequest lr;
  v1::ListRegionsResponse list;
  ASSERT_TRUE(s.regions->List(&c, lr, &list).ok());
  bool listed = false;
  for (const auto& r : list.regions()) listed |= r.name() == "broken" && !r.damage().empty();
  EXPECT_TRUE(listed);
  EXPECT_EQ(run_client(d, {"--file"}, {"broken", "open"}), 10 + static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(run_client(d, {}, {"fine", "verify", "1", "100", "32"}), 0);
  grpc::ClientContext rc;
  RawSession::deadline(&rc);
  v1::RemoveRegionRequest rm;
  rm.set_name("broken");
  v1::RemoveRegionResponse rmr;
  grpc::Status st = s.regions->Remove(&rc, rm, &rmr);
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(run_client(d, {"--file"}, {"broken", "fill", "1", "100", "32"}), 0);
}

// Issue 14.9: every region the daemon owned took a slot of its process's
// thread-heap table; the 64th create failed although max-regions is 256.
TEST_F(DaemonHostileClient, MaxRegionsRegionsAreServed) {
  RawSession s(d.socket());
  ASSERT_NE(s.id, 0u);
  for (int i = 0; i < 100; ++i) {
    v1::OpenRegionRequest req = open_request("many-" + std::to_string(i));
    req.set_max_bytes(4 << 20);
    v1::OpenRegionResponse resp;
    grpc::Status st = s.open(req, &resp);
    ASSERT_TRUE(st.ok()) << i << ": " << st.error_message();
  }
  EXPECT_EQ(run_client(d, {}, {"many-99", "fill", "1", "100", "32"}), 0);
}

// Issue 14.10: the lease count of a client that died while the daemon was
// down stayed in the region's statistics after the restart.
TEST_F(DaemonHostileClient, LeaseCountsAreRightAfterARestart) {
  pid_t holder = start_client(d, {}, {"counted", "hold", "1", "3000", "48"}, d.dir() + "/holder.log");
  bool ready = eventually([&] { return read_file(d.dir() + "/holder.log").find("ready") != std::string::npos; });
  d.kill_hard();
  kill(holder, SIGKILL);
  wait_exit(holder);
  ASSERT_TRUE(ready);
  d.start();
  ASSERT_TRUE(d.running()) << d.log();
  RawSession s(d.socket());
  v1::RegionInfo info;
  ASSERT_TRUE(eventually([&] { return s.stat("counted", &info).ok() && info.blocks_leased() == 0; }))
      << info.blocks_leased();
  v1::CheckResult c = check(s, "counted");
  EXPECT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(run_client(d, {}, {"counted", "verify", "1", "3000", "48"}), 0);
}

// Issue 14.8: /dev/shm is world-writable, so any user can fill it. A shm
// region's pages given back are holes; with the file system full, reading
// one again faults (tmpfs allocates on a read fault). That killed the daemon
// at `check` of a compacted region, and again at every start (recovery reads
// the same pages): a crash loop. Here in a mount namespace whose /dev/shm is
// a small tmpfs, held by a sleeper so that a restarted daemon finds the same
// objects.
TEST(DaemonFullShm, AFullShmFileSystemKillsNothing) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs in a mount namespace";
  pid_t ns_holder = spawn_process({"/usr/bin/unshare", "-m", "--propagation", "private", "--", "/bin/sh", "-c",
                                   "mount -t tmpfs -o size=300m tmpfs /dev/shm && exec sleep 600"});
  ASSERT_GT(ns_holder, 0);
  std::string shm = "/proc/" + std::to_string(ns_holder) + "/root/dev/shm";
  ASSERT_TRUE(eventually([&] {
    struct statvfs v {};
    return statvfs(shm.c_str(), &v) == 0 && uint64_t{v.f_blocks} * v.f_frsize == uint64_t{300} << 20;
  })) << "no namespace with a small /dev/shm";
  std::vector<std::string> in_ns = {"/usr/bin/nsenter", "-t", std::to_string(ns_holder), "-m", "--"};
  {
    DaemonProcess d({}, in_ns);
    ASSERT_TRUE(d.running()) << d.log();
    auto client = [&](const std::vector<std::string>& args) {
      std::vector<std::string> argv = in_ns;
      argv.push_back(TEST_CLIENT);
      argv.push_back(d.socket());
      argv.insert(argv.end(), args.begin(), args.end());
      return wait_exit(spawn_process(argv, d.dir() + "/clients.log"));
    };
    ASSERT_EQ(client({"tight", "fill", "1", "500", "40000"}), 0) << read_file(d.dir() + "/clients.log");
    ASSERT_EQ(client({"tight", "free", "1", "500", "40000"}), 0);
    ASSERT_EQ(client({"kept", "fill", "2", "100", "64"}), 0);
    RawSession s(d.socket());
    ASSERT_TRUE(compact(s, "").ok());
    // Anyone fills the file system.
    {
      std::string filler = shm + "/filler";
      int fd = open(filler.c_str(), O_WRONLY | O_CREAT, 0600);
      ASSERT_GE(fd, 0);
      std::vector<char> chunk(1 << 16, 'x');
      while (write(fd, chunk.data(), chunk.size()) > 0) {
      }
      close(fd);
    }
    grpc::ClientContext c;
    RawSession::deadline(&c);
    v1::CheckRequest req;
    v1::CheckResponse resp;
    ASSERT_TRUE(s.admin->Check(&c, req, &resp).ok()) << d.log();
    for (const v1::CheckResult& r : resp.results()) EXPECT_TRUE(r.ok()) << r.region() << ": " << r.message();
    ASSERT_EQ(kill(d.pid(), 0), 0) << d.log();

    // A restart on the full file system: no crash loop. Recovery reads the
    // descriptors of every page, and those given back fault: such a region
    // is listed as damaged (saying why) until there is space again.
    d.kill_hard();
    d.start();
    ASSERT_TRUE(d.running()) << d.log();
    {
      RawSession again(d.socket());
      for (const char* name : {"tight", "kept"}) {
        v1::RegionInfo info;
        grpc::Status st = again.stat(name, &info);
        EXPECT_TRUE(st.ok()) << name << ": " << st.error_message();
        if (!info.damage().empty()) {
          EXPECT_NE(info.damage().find("no backing"), std::string::npos) << info.damage();
        }
      }
    }
    ASSERT_EQ(kill(d.pid(), 0), 0) << d.log();
    // Space again: the next start serves the region whole.
    unlink((shm + "/filler").c_str());
    ASSERT_EQ(d.stop(), 0) << d.log();
    d.start();
    ASSERT_TRUE(d.running()) << d.log();
    EXPECT_EQ(client({"tight", "fill", "3", "100", "40000"}), 0) << d.log();
    EXPECT_EQ(client({"tight", "verify", "3", "100", "40000"}), 0);
    EXPECT_EQ(client({"kept", "verify", "2", "100", "64"}), 0);
  }
  kill(ns_holder, SIGKILL);
  wait_exit(ns_holder);
}

}  // namespace
}  // namespace memd
