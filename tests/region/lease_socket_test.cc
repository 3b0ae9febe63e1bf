// The owner's lease socket against a client that writes into the region it
// maps: once the region's header is overwritten, the owner refuses every
// request (FAILED_PRECONDITION) instead of reading tables whose sizes it
// can no longer trust. Found by tests/fuzz/lease_socket_fuzzer.cc: an
// overwritten lease count sent the owner's check past the lease table.
#include <unistd.h>

#include <atomic>
#include <string>

#include <gtest/gtest.h>

#include "client/lease_service.h"
#include "client/lease_socket.h"
#include "client/region.h"
#include "heap/layout.h"

namespace memd {
namespace {

class LeaseSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "lease_socket_test." + std::to_string(getpid());
    std::string mk = "mkdir -p " + dir_;
    ASSERT_EQ(system(mk.c_str()), 0);
    RegionOptions options;
    options.discipline = Discipline::kFile;
    options.max_bytes = size_t{4} << 20;
    options.max_clients = 4;
    options.owner_allocates = false;
    auto r = Region::create(dir_ + "/region", options);
    ASSERT_TRUE(r.ok()) << r.status();
    region_ = std::move(*r);
    ASSERT_TRUE(region_->serve(dir_ + "/lease.sock").ok());
  }
  void TearDown() override {
    region_.reset();
    std::string rm = "rm -rf " + dir_;
    (void)system(rm.c_str());
  }

  std::string dir_;
  std::unique_ptr<Region> region_;
};

TEST_F(LeaseSocketTest, AnOverwrittenHeaderIsRefusedFromThenOn) {
  auto channel = client::SocketLeaseChannel::connect(dir_ + "/lease.sock");
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto lease = (*channel)->hello(getpid(), client::process_start_time(getpid()));
  ASSERT_TRUE(lease.ok()) << lease.status();
  heap::AcquiredBlock blocks[4];
  auto n = (*channel)->lease(heap::PageKind::kLarge, 0, lease->stash, 2, blocks);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 2u);

  // What a client may do: its mapping is writable.
  auto* header = reinterpret_cast<heap::RegionHeader*>(region_->base());
  header->max_clients = 1u << 30;

  n = (*channel)->lease(heap::PageKind::kLarge, 0, lease->stash, 2, blocks);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), absl::StatusCode::kFailedPrecondition) << n.status();
  EXPECT_NE(n.status().message().find("header was overwritten"), std::string::npos) << n.status();
  absl::Status back = (*channel)->give_back(&blocks[0].first, 1);
  EXPECT_EQ(back.code(), absl::StatusCode::kFailedPrecondition) << back;
  EXPECT_FALSE(region_->backing_status().ok());
  header->max_clients = 4;  // the owner's close reads it again
}

}  // namespace
}  // namespace memd
