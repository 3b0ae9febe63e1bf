// The owner's lease socket against peers that are not well-behaved
// clients: one that writes into the region it maps (once the region's
// header is overwritten, the owner refuses every request with
// FAILED_PRECONDITION instead of reading tables whose sizes it can no
// longer trust; found by tests/fuzz/lease_socket_fuzzer.cc: an overwritten
// lease count sent the owner's check past the lease table), and ones that
// send half a request, or never read their answers, which must delay no
// other client.
#include <fcntl.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "region/lease_service.h"
#include "region/lease_socket.h"
#include "region/lease_wire.h"
#include "region/region.h"
#include "region/region_internals.h"
#include "heap/layout.h"
#include "region_test_util.h"

namespace memd {
namespace {

using testing::eventually;

using region::lease_wire::Op;
using region::lease_wire::Request;
using region::lease_wire::Response;

// A peer that speaks the wire format by hand. Its reads give up after 30 s,
// so that a test that goes wrong fails instead of hanging.
int connect_raw(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return -1;
  timeval tv{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

Request hello_request() {
  Request req;
  req.op = Op::kHello;
  req.pid = getpid();
  req.start_time = region::process_start_time(getpid());
  return req;
}

bool send_bytes(int fd, const void* p, size_t n) {
  return send(fd, p, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
}

// A whole answer; false on EOF, an error or the 30 s limit.
bool read_response(int fd, Response* resp) {
  char* p = reinterpret_cast<char*>(resp);
  for (size_t got = 0; got < sizeof *resp;) {
    ssize_t r = recv(fd, p + got, sizeof *resp - got, 0);
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

// Bytes this end has sent that the other end has not read yet.
int unread_by_peer(int fd) {
  int n = -1;
  return ioctl(fd, SIOCOUTQ, &n) == 0 ? n : -1;
}

// Leases a block and gives it back, `calls` times each.
void lease_and_give_back(region::LeaseChannel& channel, const region::ClientLease& lease, int calls) {
  for (int i = 0; i < calls; ++i) {
    heap::AcquiredBlock block;
    auto n = channel.lease(heap::PageKind::kLarge, 0, lease.stash, 1, &block);
    ASSERT_TRUE(n.ok()) << "call " << i << ": " << n.status();
    ASSERT_EQ(*n, 1u);
    absl::Status back = channel.give_back(&block.first, 1);
    ASSERT_TRUE(back.ok()) << "call " << i << ": " << back;
  }
}

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

  uint32_t clients() const { return RegionInternals::of(*region_)->server->clients(); }
  std::string socket() const { return dir_ + "/lease.sock"; }

  std::string dir_;
  std::unique_ptr<Region> region_;
};

// A client overwrote a field of the header fixed at creation (its mapping
// is writable). The owner puts the header back from the copy it took at
// open before it serves the next request, and leases go on.
TEST_F(LeaseSocketTest, AnOverwrittenHeaderIsRestoredByTheOwnerAndLeasesGoOn) {
  auto channel = region::SocketLeaseChannel::connect(dir_ + "/lease.sock");
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto lease = (*channel)->hello(getpid(), region::process_start_time(getpid()));
  ASSERT_TRUE(lease.ok()) << lease.status();
  heap::AcquiredBlock blocks[4];
  auto n = (*channel)->lease(heap::PageKind::kLarge, 0, lease->stash, 2, blocks);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 2u);

  // What a client may do: its mapping is writable. Written through a
  // mapping of the test's own, as another process writes, not through the
  // owner's (the owner reads the header without a lock, as it must).
  auto* header = reinterpret_cast<heap::RegionHeader*>(region_->base());
  size_t at = static_cast<size_t>(reinterpret_cast<char*>(&header->max_clients) - reinterpret_cast<char*>(header));
  int fd = open((dir_ + "/region").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  void* client_map = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(client_map, MAP_FAILED);
  auto* max_clients = reinterpret_cast<uint32_t*>(static_cast<char*>(client_map) + at);
  *max_clients = 1u << 30;
  EXPECT_FALSE(region_->backing_status().ok());

  n = (*channel)->lease(heap::PageKind::kLarge, 0, lease->stash, 2, blocks + 2);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 2u);
  EXPECT_EQ(*max_clients, 4u) << "the header was not restored";
  EXPECT_TRUE(region_->backing_status().ok()) << region_->backing_status();
  EXPECT_TRUE((*channel)->give_back(&blocks[0].first, 1).ok());
  EXPECT_EQ(region_->header_facts().max_clients, 4u);
  EXPECT_TRUE(region_->check().ok()) << region_->check();
  // What it cannot restore still refuses: a count of committed pages past
  // the reservation (a lifecycle field, which changes as the region grows).
  uint32_t committed = header->page_heap.committed_pages.load();
  auto* committed_word = reinterpret_cast<uint32_t*>(
      static_cast<char*>(client_map) +
      (reinterpret_cast<char*>(&header->page_heap.committed_pages) - reinterpret_cast<char*>(header)));
  *committed_word = header->max_pages + 1;
  bool repaired = true;
  EXPECT_FALSE(region_->repair_backing(&repaired).ok());
  EXPECT_FALSE(repaired);
  *committed_word = committed;
  EXPECT_TRUE(region_->repair_backing().ok());
  munmap(client_map, 4096);
}

// One thread serves every connection, so a connection that stops in the
// middle of a request must not hold that thread. The half-sent request
// stays where it is, the other client's calls are answered meanwhile, and
// the half-sent request, finished later, is answered too: its connection
// was neither waited on nor given up.
TEST_F(LeaseSocketTest, AHalfSentRequestDelaysNoOtherClient) {
  int silent = connect_raw(socket());  // connects and says nothing
  int half = connect_raw(socket());
  ASSERT_GE(silent, 0);
  ASSERT_GE(half, 0);
  Request hello = hello_request();
  const size_t first = sizeof hello / 2;
  ASSERT_TRUE(send_bytes(half, &hello, first));
  // The owner has read the half request: it is in its hands now.
  ASSERT_TRUE(eventually([&] { return unread_by_peer(half) == 0; }));

  auto channel = region::SocketLeaseChannel::connect(socket());
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto lease = (*channel)->hello(getpid(), region::process_start_time(getpid()));
  ASSERT_TRUE(lease.ok()) << lease.status();
  lease_and_give_back(**channel, *lease, 200);
  EXPECT_EQ(clients(), 1u);

  // Both slow peers are still connected and still served.
  ASSERT_TRUE(send_bytes(half, reinterpret_cast<const char*>(&hello) + first, sizeof hello - first));
  Response resp;
  ASSERT_TRUE(read_response(half, &resp)) << "the owner gave up the connection with half a request";
  EXPECT_EQ(resp.code, 0) << resp.message;
  ASSERT_TRUE(send_bytes(silent, &hello, sizeof hello));
  ASSERT_TRUE(read_response(silent, &resp));
  EXPECT_EQ(resp.code, 0) << resp.message;
  EXPECT_EQ(clients(), 3u);

  // Their ends take their leases back; the honest client's stays.
  close(half);
  close(silent);
  EXPECT_TRUE(eventually([&] { return clients() == 1; })) << clients();
  lease_and_give_back(**channel, *lease, 1);
  channel->reset();
  EXPECT_TRUE(eventually([&] { return clients() == 0; })) << clients();
  EXPECT_TRUE(region_->check().ok()) << region_->check();
}

// A second server on the same region, with a short stall limit.
class StalledPeerTest : public LeaseSocketTest {
 protected:
  void SetUp() override {
    LeaseSocketTest::SetUp();
    if (HasFatalFailure()) return;
    region::SocketLeaseServer::Limits limits;
    limits.stalled_peer = std::chrono::milliseconds(200);
    auto s = region::SocketLeaseServer::start(dir_ + "/short.sock", region_->lease_service(), nullptr, limits);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
  }
  void TearDown() override {
    server_.reset();
    LeaseSocketTest::TearDown();
  }

  std::unique_ptr<region::SocketLeaseServer> server_;
};

// A registered peer that stops in the middle of a request is dropped once
// it has made no progress for the limit, and what it held is taken back;
// one that is merely idle between requests is not.
TEST_F(StalledPeerTest, APeerStalledMidRequestIsDroppedAfterTheLimit) {
  int idle = connect_raw(dir_ + "/short.sock");
  int stalled = connect_raw(dir_ + "/short.sock");
  ASSERT_GE(idle, 0);
  ASSERT_GE(stalled, 0);
  Request hello = hello_request();
  Response resp;
  for (int fd : {idle, stalled}) {
    ASSERT_TRUE(send_bytes(fd, &hello, sizeof hello));
    ASSERT_TRUE(read_response(fd, &resp));
    ASSERT_EQ(resp.code, 0) << resp.message;
  }
  EXPECT_EQ(server_->clients(), 2u);
  uint32_t stalled_slot = resp.a;
  Request lease;
  lease.op = Op::kLease;
  lease.kind = static_cast<uint32_t>(heap::PageKind::kLarge);
  lease.owner = resp.c;
  lease.count = 2;
  ASSERT_TRUE(send_bytes(stalled, &lease, sizeof lease));
  ASSERT_TRUE(read_response(stalled, &resp));
  ASSERT_EQ(resp.code, 0) << resp.message;
  EXPECT_EQ(region_->lease_service()->blocks_held(stalled_slot), 2u);

  ASSERT_TRUE(send_bytes(stalled, &lease, sizeof lease / 3));
  // The owner closes its end: EOF, well before the 30 s read limit.
  EXPECT_EQ(recv(stalled, &resp, sizeof resp, 0), 0) << std::strerror(errno);
  EXPECT_TRUE(eventually([&] { return server_->clients() == 1; })) << server_->clients();
  EXPECT_EQ(region_->lease_service()->blocks_held(stalled_slot), 0u);

  // The idle one was left alone: a second hello is refused, and answered.
  ASSERT_TRUE(send_bytes(idle, &hello, sizeof hello));
  ASSERT_TRUE(read_response(idle, &resp)) << "an idle connection was dropped";
  EXPECT_EQ(resp.code, static_cast<int32_t>(absl::StatusCode::kFailedPrecondition)) << resp.message;
  close(stalled);
  close(idle);
  EXPECT_TRUE(eventually([&] { return server_->clients() == 0; }));
  EXPECT_TRUE(region_->check().ok()) << region_->check();
}

// A peer that sends requests and never reads the answers: once its socket
// is full the owner holds one answer for it and reads nothing more from it,
// serves the others, and drops it after the limit.
TEST_F(StalledPeerTest, APeerThatReadsNoAnswersDelaysNoOneAndIsDropped) {
  int greedy = connect_raw(dir_ + "/short.sock");
  ASSERT_GE(greedy, 0);
  Request hello = hello_request();
  Response resp;
  ASSERT_TRUE(send_bytes(greedy, &hello, sizeof hello));
  ASSERT_TRUE(read_response(greedy, &resp));
  ASSERT_EQ(resp.code, 0) << resp.message;
  // Releasing a run it does not hold: refused, answered, harmless.
  Request req;
  req.op = Op::kReleaseHuge;
  int sent = 0;
  while (send(greedy, &req, sizeof req, MSG_NOSIGNAL | MSG_DONTWAIT) == static_cast<ssize_t>(sizeof req)) ++sent;
  ASSERT_GT(sent, 0);

  auto channel = region::SocketLeaseChannel::connect(dir_ + "/short.sock");
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto lease = (*channel)->hello(getpid(), region::process_start_time(getpid()));
  ASSERT_TRUE(lease.ok()) << lease.status();
  lease_and_give_back(**channel, *lease, 50);

  // Dropped (reading now would let it make progress again): what it can
  // read then is answers, then the end (a reset: the owner closed with its
  // requests unread), not the 30 s read limit.
  EXPECT_TRUE(eventually([&] { return server_->clients() == 1; })) << server_->clients();
  ssize_t r = 0;
  while ((r = recv(greedy, &resp, sizeof resp, 0)) > 0) {
  }
  EXPECT_TRUE(r == 0 || errno == ECONNRESET) << std::strerror(errno);
  close(greedy);
  channel->reset();
  EXPECT_TRUE(eventually([&] { return server_->clients() == 0; }));
}

}  // namespace
}  // namespace memd
