// memd serving real client processes: regions shared through the daemon,
// many clients at once, read-only attachments, drains, and the daemon's
// command line.
#include <gtest/gtest.h>
#include <signal.h>

#include "region/region_internals.h"
#include "tests/daemon/raw_session.h"
#include "tests/daemon/test_util.h"

namespace memd {
namespace {

using namespace memd::testing;

TEST(DaemonService, ClientsShareARegionThroughTheDaemon) {
  DaemonProcess d;
  ASSERT_TRUE(d.running()) << d.log();
  std::unique_ptr<Client> c = connect_to(d);
  ASSERT_NE(c, nullptr);
  absl::StatusOr<std::unique_ptr<Region>> r = c->open("shared", region_options());
  ASSERT_TRUE(r.ok()) << r.status();
  // Four processes allocate and publish; others read and free what they left.
  std::vector<pid_t> kids;
  for (int id = 1; id <= 4; ++id) kids.push_back(start_client(d, {}, {"shared", "fill", std::to_string(id), "500", "100"}));
  for (pid_t k : kids) EXPECT_EQ(wait_exit(k), 0) << read_file(d.dir() + "/clients.log");
  for (int id = 1; id <= 4; ++id) EXPECT_EQ(run_client(d, {}, {"shared", "verify", std::to_string(id), "500", "100"}), 0);
  for (int id = 1; id <= 4; ++id) EXPECT_EQ(run_client(d, {}, {"shared", "free", std::to_string(id), "500", "100"}), 0);
  {
    // Checked by the daemon, under the region's lock: it may still be taking
    // back the leases of the clients that just exited.
    RawSession admin(d.socket());
    grpc::ClientContext ctx;
    v1::CheckResponse check;
    ASSERT_TRUE(admin.admin->Check(&ctx, v1::CheckRequest(), &check).ok());
    ASSERT_EQ(check.results_size(), 1);
    EXPECT_TRUE(check.results(0).ok()) << check.results(0).message();
  }
  // This process reads an object another wrote, by offset.
  EXPECT_EQ(run_client(d, {}, {"shared", "fill", "9", "1", "64"}), 0);
  auto* board = static_cast<uint64_t*>((*r)->find_bytes("board-9"));
  ASSERT_NE(board, nullptr);
  ASSERT_NE(board[0], 0u);
  EXPECT_EQ(static_cast<unsigned char*>((*r)->at(board[0] - 1))[0], static_cast<unsigned char>(9 * 131));
  void* p = (*r)->alloc(64);
  ASSERT_NE(p, nullptr);
  (*r)->free(p);
  EXPECT_GT(c->lease_calls(), 0u);
}

TEST(DaemonService, ManyClientsAtOnce) {
  DaemonProcess d;
  ASSERT_TRUE(d.running()) << d.log();
  constexpr int kClients = 16;
  std::vector<pid_t> kids;
  for (int id = 1; id <= kClients; ++id) {
    kids.push_back(start_client(d, {}, {"crowd", "fill", std::to_string(id), "2000", std::to_string(16 + id * 24)}));
  }
  for (pid_t k : kids) EXPECT_EQ(wait_exit(k), 0) << read_file(d.dir() + "/clients.log");
  for (int id = 1; id <= kClients; ++id) {
    EXPECT_EQ(run_client(d, {}, {"crowd", "verify", std::to_string(id), "2000", std::to_string(16 + id * 24)}), 0);
  }
  RawSession admin(d.socket());
  grpc::ClientContext ctx;
  v1::CheckRequest req;
  v1::CheckResponse resp;
  ASSERT_TRUE(admin.admin->Check(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.results_size(), 1);
  EXPECT_TRUE(resp.results(0).ok()) << resp.results(0).message();
  v1::RegionInfo info;
  ASSERT_TRUE(admin.stat("crowd", &info).ok());
  EXPECT_EQ(info.objects(), uint64_t{kClients} * 2000 + kClients);  // the objects and each board
}

TEST(DaemonService, ReadOnlyAttachmentSeesDataAndLeasesNothing) {
  DaemonProcess d;
  ASSERT_TRUE(d.running()) << d.log();
  ASSERT_EQ(run_client(d, {}, {"ro", "fill", "1", "100", "50"}), 0);
  std::unique_ptr<Client> c = connect_to(d);
  OpenOptions o = region_options();
  o.read_only = true;
  o.create = false;
  absl::StatusOr<std::unique_ptr<Region>> r = c->open("ro", o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE((*r)->read_only());
  auto* board = static_cast<uint64_t*>((*r)->find_bytes("board-1"));
  ASSERT_NE(board, nullptr);
  EXPECT_EQ(static_cast<unsigned char*>((*r)->at(board[5] - 1))[0], static_cast<unsigned char>(131 + 35));
  errno = 0;
  EXPECT_EQ((*r)->alloc(16), nullptr);
  EXPECT_EQ(errno, EROFS);
}

TEST(DaemonService, DrainTakesBackSpareBlocks) {
  DaemonProcess d;
  ASSERT_TRUE(d.running()) << d.log();
  std::unique_ptr<Client> c = connect_to(d);
  absl::StatusOr<std::unique_ptr<Region>> r = c->open("drained", region_options());
  ASSERT_TRUE(r.ok()) << r.status();
  // Objects of many classes: blocks come in batches, spares wait in the stash.
  std::vector<void*> objs;
  for (int i = 0; i < 20000; ++i) objs.push_back((*r)->alloc(16 + (i % 60) * 8));
  for (void* p : objs) (*r)->free(p);
  uint64_t before = blocks_of(**r, getpid());
  ASSERT_GT(before, 0u);
  RawSession admin(d.socket());
  grpc::ClientContext ctx;
  v1::DrainRequest req;
  req.set_pid(getpid());
  v1::DrainResponse resp;
  grpc::Status s = admin.admin->Drain(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.sessions(), 2u);  // this process has two sessions: the Client's and the raw one
  EXPECT_TRUE(eventually([&] { return blocks_of(**r, getpid()) < before; }))
      << "before " << before << ", now " << blocks_of(**r, getpid());
  // The daemon checks under the region's lock: the drain may still be giving
  // blocks back (a check from here could see the page heap mid-change).
  grpc::ClientContext check_ctx;
  v1::CheckResponse check;
  ASSERT_TRUE(admin.admin->Check(&check_ctx, v1::CheckRequest(), &check).ok());
  ASSERT_EQ(check.results_size(), 1);
  EXPECT_TRUE(check.results(0).ok()) << check.results(0).message();
  // Unknown pid: NOT_FOUND.
  grpc::ClientContext ctx2;
  req.set_pid(999999);
  EXPECT_EQ(admin.admin->Drain(&ctx2, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST(DaemonService, ListsClientsAndStats) {
  DaemonProcess d;
  ASSERT_TRUE(d.running()) << d.log();
  std::unique_ptr<Client> c = connect_to(d);
  absl::StatusOr<std::unique_ptr<Region>> r = c->open("listed", region_options());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_NE((*r)->alloc(100), nullptr);
  RawSession admin(d.socket());
  grpc::ClientContext ctx;
  v1::ListClientsResponse clients;
  ASSERT_TRUE(admin.admin->ListClients(&ctx, v1::ListClientsRequest(), &clients).ok());
  bool found = false;
  for (const v1::ClientInfo& ci : clients.clients()) {
    if (ci.pid() != getpid() || ci.leases_size() != 1) continue;
    found = true;
    EXPECT_EQ(ci.program(), "daemon test");
    EXPECT_EQ(ci.leases(0).region(), "listed");
    EXPECT_GT(ci.leases(0).blocks(), 0u);
  }
  EXPECT_TRUE(found);
  grpc::ClientContext ctx2;
  v1::StatsResponse stats;
  ASSERT_TRUE(admin.admin->Stats(&ctx2, v1::StatsRequest(), &stats).ok());
  EXPECT_EQ(stats.regions(), 1u);
  EXPECT_EQ(stats.sessions(), 2u);
  EXPECT_GT(stats.rpcs(), 2u);
  EXPECT_EQ(stats.version(), MEMD_VERSION);  // the project's version (CMakeLists.txt)
}

// memdctl check on a busy region: clients allocating while the daemon checks
// must not look like corruption (before, most such checks failed: the
// inside of blocks changed under them).
TEST(DaemonService, CheckWhileClientsAllocateIsExact) {
  DaemonProcess d;
  ASSERT_TRUE(d.running()) << d.log();
  std::vector<pid_t> kids;
  for (int id = 1; id <= 2; ++id) kids.push_back(start_client(d, {}, {"busy", "churn", std::to_string(id), "3"}));
  RawSession admin(d.socket());
  ASSERT_TRUE(eventually([&] {
    v1::RegionInfo info;
    return admin.stat("busy", &info).ok() && info.objects() > 100;
  }));
  int checks = 0, skipped_some = 0;
  for (; checks < 40; ++checks) {
    grpc::ClientContext ctx;
    v1::CheckResponse resp;
    ASSERT_TRUE(admin.admin->Check(&ctx, v1::CheckRequest(), &resp).ok());
    ASSERT_EQ(resp.results_size(), 1);
    EXPECT_TRUE(resp.results(0).ok()) << resp.results(0).message();
    skipped_some += resp.results(0).blocks_skipped() > 0;
  }
  EXPECT_GT(skipped_some, 0) << "no check ran while a client thread owned blocks";
  for (pid_t k : kids) EXPECT_EQ(wait_exit(k), 0);
  // Quiet again: every block is inspected.
  ASSERT_TRUE(eventually([&] {
    grpc::ClientContext ctx;
    v1::CheckResponse resp;
    return admin.admin->Check(&ctx, v1::CheckRequest(), &resp).ok() && resp.results_size() == 1 &&
           resp.results(0).ok() && resp.results(0).blocks_skipped() == 0;
  }));
}

// The README's walk-through: examples/notes from two processes at once, then
// after a daemon restart.
TEST(DaemonService, NotesExampleSharesAListAcrossProcessesAndRestarts) {
  DaemonProcess d;
  ASSERT_TRUE(d.running()) << d.log();
  std::vector<std::string> env = {"MEMD_SOCKET=" + d.socket()};
  std::string log = d.dir() + "/notes.log";
  pid_t a = spawn_process({NOTES_BINARY, "add", "hello from one process"}, log, env);
  pid_t b = spawn_process({NOTES_BINARY, "add", "and from another"}, log, env);
  ASSERT_EQ(wait_exit(a), 0) << read_file(log);
  ASSERT_EQ(wait_exit(b), 0) << read_file(log);
  auto listed = [&](const std::string& out) {
    return wait_exit(spawn_process({NOTES_BINARY, "list"}, out, env)) == 0 &&
           read_file(out).find("] hello from one process\n") != std::string::npos &&
           read_file(out).find("] and from another\n") != std::string::npos;
  };
  EXPECT_TRUE(listed(d.dir() + "/list1.out")) << read_file(d.dir() + "/list1.out");
  EXPECT_EQ(d.stop(), 0);
  d.start();
  ASSERT_TRUE(d.running()) << d.log();
  EXPECT_TRUE(listed(d.dir() + "/list2.out")) << read_file(d.dir() + "/list2.out");
}

// --- the command line ---

int run_memd(const std::vector<std::string>& args, const std::string& out) {
  std::vector<std::string> argv = {MEMD_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return wait_exit(spawn_process(argv, out));
}

TEST(DaemonCommandLine, HelpConfigFileAndErrors) {
  DaemonProcess d;  // for its directory
  std::string out = d.dir() + "/cli.out";
  EXPECT_EQ(run_memd({"--help"}, out), 0);
  EXPECT_NE(read_file(out).find("usage: memd"), std::string::npos);
  EXPECT_NE(read_file(out).find("--data-dir"), std::string::npos);
  std::string version_out = d.dir() + "/version.out";
  EXPECT_EQ(run_memd({"--version"}, version_out), 0);
  EXPECT_EQ(read_file(version_out), std::string("memd ") + MEMD_VERSION + " (protocol memd.v1)\n");

  std::string conf = d.dir() + "/memd.conf";
  std::ofstream(conf) << "# test\nregion-bytes = 64M\nlog-level=warning\n";
  std::string out2 = d.dir() + "/cli2.out";
  EXPECT_EQ(run_memd({"--config", conf, "--region-clients", "8", "--print-config"}, out2), 0);
  std::string printed = read_file(out2);
  EXPECT_NE(printed.find("region-bytes = 67108864"), std::string::npos) << printed;
  EXPECT_NE(printed.find("region-clients = 8"), std::string::npos) << printed;
  EXPECT_NE(printed.find("log-level = warning"), std::string::npos) << printed;

  std::string out3 = d.dir() + "/cli3.out";
  EXPECT_EQ(run_memd({"--bogus", "1"}, out3), 2);
  EXPECT_NE(read_file(out3).find("unknown setting \"bogus\""), std::string::npos) << read_file(out3);
  std::string out4 = d.dir() + "/cli4.out";
  EXPECT_EQ(run_memd({"--region-bytes", "lots"}, out4), 2);
  EXPECT_NE(read_file(out4).find("bad value \"lots\""), std::string::npos) << read_file(out4);

  // A second daemon on the same socket refuses to start.
  std::string out5 = d.dir() + "/cli5.out";
  EXPECT_EQ(run_memd({"--socket", d.socket(), "--data-dir", d.dir() + "/data2"}, out5), 1);
  EXPECT_NE(read_file(out5).find("another memd already serves"), std::string::npos) << read_file(out5);
  EXPECT_TRUE(socket_answers(d.socket()));
}

}  // namespace
}  // namespace memd
