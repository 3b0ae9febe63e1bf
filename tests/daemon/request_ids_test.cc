// The ids that make lease calls safe to retry, as a client built on the
// generated stubs sends them: a repeated id is answered as before and not
// applied twice; an id the daemon no longer remembers is refused on a retry
// but applied on its first attempt (one thread of a busy process may send
// it after 64 later calls of its other threads).
#include <gtest/gtest.h>

#include "tests/daemon/raw_session.h"
#include "tests/daemon/test_util.h"

namespace memd {
namespace {

using namespace memd::testing;

class RequestIds : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(d.running()) << d.log();
    ASSERT_NE(s.id, 0u) << s.refused.error_message();
    v1::OpenRegionRequest req;
    req.set_name("ids");
    req.set_discipline(v1::DISCIPLINE_SHM);
    req.set_create(true);
    req.set_max_bytes(64 << 20);
    ASSERT_TRUE(s.open(req, &region).ok());
  }
  // One block of a small class for the stash, with id `request`.
  grpc::Status lease(uint64_t request, bool first_attempt, uint32_t* page) {
    grpc::ClientContext c;
    RawSession::deadline(&c);
    v1::LeaseRequest req;
    req.set_session(s.id);
    req.set_region(region.handle());
    req.set_kind(v1::BLOCK_SEGREGATED);
    req.set_size_class(2);
    req.set_owner(region.stash_owner());
    req.set_count(1);
    req.set_request(request);
    req.set_first_attempt(first_attempt);
    v1::LeaseResponse resp;
    grpc::Status st = s.leases->Lease(&c, req, &resp);
    if (st.ok() && resp.blocks_size() == 1) *page = resp.blocks(0).page();
    return st;
  }
  uint64_t blocks_held() {
    v1::RegionInfo info;
    EXPECT_TRUE(s.stat("ids", &info).ok());
    return info.blocks_leased();
  }
  DaemonProcess d;
  RawSession s{d.socket()};
  v1::OpenRegionResponse region;
};

TEST_F(RequestIds, ARepeatedIdGetsTheSameBlocksOnce) {
  uint32_t first = 0, again = 1;
  ASSERT_TRUE(lease(7, true, &first).ok());
  const uint64_t held = blocks_held();
  grpc::Status st = lease(7, false, &again);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(again, first);
  EXPECT_EQ(blocks_held(), held);
}

TEST_F(RequestIds, AnIdPushedOutIsRefusedOnARetryButAppliedOnItsFirstAttempt) {
  uint32_t page = 0;
  // Ids 2..66 answered: 64 kept, so 1 and 2 are below what the daemon keeps.
  for (uint64_t id = 2; id <= 66; ++id) ASSERT_TRUE(lease(id, true, &page).ok()) << id;
  const uint64_t held = blocks_held();
  grpc::Status retry = lease(2, false, &page);
  EXPECT_EQ(retry.error_code(), grpc::StatusCode::ABORTED) << retry.error_message();
  EXPECT_NE(retry.error_message().find("older than"), std::string::npos) << retry.error_message();
  EXPECT_EQ(blocks_held(), held) << "a refused retry granted nothing";
  uint32_t late = 0;
  grpc::Status first = lease(1, true, &late);
  ASSERT_TRUE(first.ok()) << first.error_message();
  EXPECT_EQ(blocks_held(), held + 1);
  // Its answer is kept now: a retry of it gets the same block, not another.
  uint32_t replayed = 0;
  ASSERT_TRUE(lease(1, false, &replayed).ok());
  EXPECT_EQ(replayed, late);
  EXPECT_EQ(blocks_held(), held + 1);
}

}  // namespace
}  // namespace memd
