// Bad requests get the right gRPC status and a message, and the daemon
// keeps serving everyone else: unknown regions, absurd sizes, bad names,
// lies about the pid, foreign sessions, leases out of range, and users the
// region's mode does not admit.
#include <unistd.h>

#include <gtest/gtest.h>
#include <pwd.h>

#include "tests/daemon/raw_session.h"
#include "tests/daemon/test_util.h"

namespace memd {
namespace {

using namespace memd::testing;

v1::OpenRegionRequest open_request(const std::string& name, v1::Discipline d = v1::DISCIPLINE_SHM, bool create = true) {
  v1::OpenRegionRequest r;
  r.set_name(name);
  r.set_discipline(d);
  r.set_create(create);
  r.set_max_bytes(64 << 20);
  return r;
}

class DaemonBadInput : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(d.running()) << d.log(); }
  void TearDown() override {
    // After every bad request, the daemon still serves a normal client.
    EXPECT_EQ(run_client(d, {}, {"healthy", "fill", "1", "100", "32"}), 0) << d.log();
    EXPECT_EQ(run_client(d, {}, {"healthy", "verify", "1", "100", "32"}), 0);
  }
  DaemonProcess d;
};

TEST_F(DaemonBadInput, RegionRequests) {
  RawSession s(d.socket());
  ASSERT_NE(s.id, 0u) << s.refused.error_message();
  v1::OpenRegionResponse resp;
  auto code = [&](v1::OpenRegionRequest req) { return s.open(req, &resp); };

  grpc::Status st = code(open_request("missing", v1::DISCIPLINE_SHM, false));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(st.error_message().find("missing"), std::string::npos);

  for (std::string bad : {std::string(""), std::string("../etc"), std::string("a/b"), std::string(".hidden"),
                          std::string(300, 'x'), std::string("sp ace"), std::string("nul\0x", 5)}) {
    st = code(open_request(bad));
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_FALSE(st.error_message().empty());
  }
  v1::OpenRegionRequest huge = open_request("huge");
  huge.set_max_bytes(uint64_t{1} << 60);
  st = code(huge);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("max-region-bytes"), std::string::npos) << st.error_message();

  v1::OpenRegionRequest clients = open_request("clients");
  clients.set_max_clients(1u << 30);
  EXPECT_EQ(code(clients).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::OpenRegionRequest tiny = open_request("tiny");
  tiny.set_max_bytes(4096);
  EXPECT_EQ(code(tiny).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::OpenRegionRequest mode = open_request("mode");
  mode.set_mode(01777);
  EXPECT_EQ(code(mode).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code(open_request("nodisc", v1::DISCIPLINE_UNSPECIFIED)).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code(open_request("baddisc", static_cast<v1::Discipline>(9))).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  ASSERT_TRUE(code(open_request("exists")).ok());
  v1::OpenRegionRequest excl = open_request("exists");
  excl.set_exclusive(true);
  EXPECT_EQ(code(excl).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(code(open_request("exists", v1::DISCIPLINE_FILE)).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  // Opening it twice in one session.
  EXPECT_EQ(code(open_request("exists")).error_code(), grpc::StatusCode::ALREADY_EXISTS);

  // Removing a region with a client attached.
  grpc::ClientContext ctx;
  v1::RemoveRegionRequest rm;
  rm.set_name("exists");
  v1::RemoveRegionResponse rm_resp;
  EXPECT_EQ(s.regions->Remove(&ctx, rm, &rm_resp).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  v1::RegionInfo info;
  EXPECT_EQ(s.stat("nothing", &info).error_code(), grpc::StatusCode::NOT_FOUND);
}

// A name of any length is quoted in part: the whole of 16 KiB would not fit
// in gRPC's metadata, and the client would see RESOURCE_EXHAUSTED instead
// of the answer.
TEST_F(DaemonBadInput, LongUnknownNamesAreNotFoundAndQuotedInPart) {
  RawSession s(d.socket());
  ASSERT_NE(s.id, 0u) << s.refused.error_message();
  // Multi-byte characters, so that a cut in the middle of one would show.
  std::string name;
  while (name.size() < 16 * 1024) name += "r\xc3\xa9gion-";
  v1::RegionInfo info;
  grpc::Status st = s.stat(name, &info);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << st.error_message().substr(0, 200);
  EXPECT_LT(st.error_message().size(), 300u);
  EXPECT_NE(st.error_message().find("r\xc3\xa9gion-"), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find("\xe2\x80\xa6"), std::string::npos) << st.error_message();  // the ellipsis
  grpc::ClientContext ctx;
  RawSession::deadline(&ctx);
  v1::RemoveRegionRequest rm;
  rm.set_name(name);
  v1::RemoveRegionResponse rm_resp;
  st = s.regions->Remove(&ctx, rm, &rm_resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << st.error_message().substr(0, 200);
  EXPECT_LT(st.error_message().size(), 300u);
  v1::OpenRegionResponse resp;
  st = s.open(open_request(name, v1::DISCIPLINE_SHM, false), &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message().substr(0, 200);
  EXPECT_LT(st.error_message().size(), 300u);
  // The admin calls that name a region quote it the same way.
  grpc::ClientContext check_ctx;
  RawSession::deadline(&check_ctx);
  v1::CheckRequest check;
  check.set_region(name);
  v1::CheckResponse check_resp;
  st = s.admin->Check(&check_ctx, check, &check_resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << st.error_message().substr(0, 200);
  EXPECT_LT(st.error_message().size(), 300u);
  grpc::ClientContext drain_ctx;
  RawSession::deadline(&drain_ctx);
  v1::DrainRequest drain;
  drain.set_pid(getpid());
  drain.set_region(name);
  v1::DrainResponse drain_resp;
  st = s.admin->Drain(&drain_ctx, drain, &drain_resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << st.error_message().substr(0, 200);
  EXPECT_LT(st.error_message().size(), 300u);
}

// Every test daemon has an shm namespace; a name of 200 (the documented
// limit) is the user's, and the prefix is not counted against it.
TEST_F(DaemonBadInput, NamesOfTwoHundredWorkUnderAnShmNamespace) {
  ASSERT_FALSE(d.shm_namespace().empty());
  RawSession s(d.socket());
  ASSERT_NE(s.id, 0u) << s.refused.error_message();
  v1::OpenRegionResponse resp;
  std::string name(200, 'n');
  grpc::Status st = s.open(open_request(name), &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_NE(resp.object_path().find(d.shm_namespace()), std::string::npos) << resp.object_path();
  EXPECT_EQ(s.open(open_request(std::string(201, 'n')), &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(DaemonBadInput, LeaseRequests) {
  RawSession s(d.socket());
  ASSERT_NE(s.id, 0u) << s.refused.error_message();
  v1::OpenRegionResponse region;
  ASSERT_TRUE(s.open(open_request("leases"), &region).ok());
  auto lease = [&](uint32_t handle, v1::BlockKind kind, uint32_t cls, uint32_t owner, uint32_t count) {
    grpc::ClientContext c;
    RawSession::deadline(&c);
    v1::LeaseRequest req;
    req.set_session(s.id);
    req.set_region(handle);
    req.set_kind(kind);
    req.set_size_class(cls);
    req.set_owner(owner);
    req.set_count(count);
    v1::LeaseResponse resp;
    return s.leases->Lease(&c, req, &resp);
  };
  uint32_t stash = region.stash_owner();
  EXPECT_EQ(lease(region.handle() + 7, v1::BLOCK_SEGREGATED, 2, stash, 1).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(lease(region.handle(), v1::BLOCK_SEGREGATED, 60000, stash, 1).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(lease(region.handle(), v1::BLOCK_SEGREGATED, 2, stash, 0).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(lease(region.handle(), v1::BLOCK_SEGREGATED, 2, stash, 1000).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(lease(region.handle(), static_cast<v1::BlockKind>(4), 0, stash, 1).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // An owner slot this client does not hold.
  EXPECT_EQ(lease(region.handle(), v1::BLOCK_SEGREGATED, 2, stash + 1, 1).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(lease(region.handle(), v1::BLOCK_SEGREGATED, 2, stash, 4).ok());

  grpc::ClientContext c1;
  v1::ReleaseRequest rel;
  rel.set_session(s.id);
  rel.set_region(region.handle());
  rel.add_pages(123456789);
  v1::ReleaseResponse rel_resp;
  EXPECT_EQ(s.leases->Release(&c1, rel, &rel_resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  grpc::ClientContext c2;
  v1::LeaseRunRequest run;
  run.set_session(s.id);
  run.set_region(region.handle());
  run.set_pages(1u << 31);
  v1::LeaseRunResponse run_resp;
  grpc::Status st = s.leases->LeaseRun(&c2, run, &run_resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  grpc::ClientContext c3;
  run.set_pages(4);
  run.set_align_pages(3);
  EXPECT_EQ(s.leases->LeaseRun(&c3, run, &run_resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  grpc::ClientContext c4;
  v1::ReleaseRunRequest rr;
  rr.set_session(s.id);
  rr.set_region(region.handle());
  rr.set_page(5);
  v1::ReleaseRunResponse rr_resp;
  EXPECT_EQ(s.leases->ReleaseRun(&c4, rr, &rr_resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(DaemonBadInput, SessionsCannotLieOrBeBorrowed) {
  // A pid that is not the caller's.
  RawSession liar(d.socket(), getpid() == 1 ? 2 : 1);
  EXPECT_EQ(liar.id, 0u);
  EXPECT_EQ(liar.refused.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(liar.refused.error_message().find("SO_PEERCRED"), std::string::npos) << liar.refused.error_message();

  // Another connection's session (same process, another connection).
  RawSession owner(d.socket());
  RawSession thief(d.socket(), 0, /*own_connection=*/true);
  ASSERT_NE(owner.id, 0u);
  ASSERT_NE(thief.id, 0u);
  v1::OpenRegionRequest req = open_request("stolen");
  req.set_session(owner.id);
  v1::OpenRegionResponse resp;
  EXPECT_EQ(thief.open(req, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  req.set_session(987654321);
  EXPECT_EQ(thief.open(req, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(DaemonBadInput, RegionModesAreEnforcedForOtherUsers) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a client as another user";
  passwd* nobody = getpwnam("nobody");
  ASSERT_NE(nobody, nullptr);
  std::string uid = std::to_string(nobody->pw_uid);
  // Root's private region: nobody may not open it.
  ASSERT_EQ(run_client(d, {"--mode", "600"}, {"private", "fill", "1", "10", "16"}), 0);
  EXPECT_EQ(run_client(d, {"--uid", uid}, {"private", "open"}), client_status_exit(absl::StatusCode::kPermissionDenied));
  // A region open to all: nobody allocates in it; the shm object's mode says so too.
  ASSERT_EQ(run_client(d, {"--mode", "666"}, {"public", "fill", "1", "10", "16"}), 0);
  EXPECT_EQ(run_client(d, {"--uid", uid}, {"public", "fill", "2", "100", "16"}), 0);
  EXPECT_EQ(run_client(d, {}, {"public", "verify", "2", "100", "16"}), 0);
  struct stat st {};
  ASSERT_EQ(stat(("/dev/shm/memd." + d.shm_namespace() + ".public").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u);
  ASSERT_EQ(stat(("/dev/shm/memd." + d.shm_namespace() + ".private").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // Regions nobody creates belong to nobody.
  EXPECT_EQ(run_client(d, {"--uid", uid, "--file"}, {"theirs", "fill", "1", "10", "16"}), 0);
  ASSERT_EQ(stat((d.dir() + "/data/regions/theirs.region").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, nobody->pw_uid);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

}  // namespace
}  // namespace memd

namespace memd {
namespace {

using namespace memd::testing;

// A client may hold at most client-block-quota blocks of a region: beyond
// that its leases are refused (RESOURCE_EXHAUSTED) and its allocations fail
// with ENOMEM, while other clients go on.
TEST(DaemonQuota, ClientBlockQuotaStopsOneClientOnly) {
  DaemonProcess d({"--client-block-quota", "6"});
  ASSERT_TRUE(d.running()) << d.log();
  // 1000 objects of 200 bytes need far more than 6 blocks.
  EXPECT_EQ(run_client(d, {}, {"quota", "fill", "1", "1000", "200"}),
            client_status_exit(absl::StatusCode::kResourceExhausted));
  // A small client fits.
  EXPECT_EQ(run_client(d, {}, {"quota", "fill", "2", "10", "200"}), 0);
  EXPECT_EQ(run_client(d, {}, {"quota", "verify", "2", "10", "200"}), 0);
  RawSession s(d.socket());
  grpc::ClientContext ctx;
  v1::CheckResponse check;
  ASSERT_TRUE(s.admin->Check(&ctx, v1::CheckRequest(), &check).ok());
  ASSERT_EQ(check.results_size(), 1);
  EXPECT_TRUE(check.results(0).ok()) << check.results(0).message();
}

}  // namespace
}  // namespace memd
