// The connection table's deadlines without gRPC: a socket pair stands for a
// connection (one end "gRPC's", a duplicate of it the table's watch, the
// other end the client's), and sweeps are given the time, so no test
// waits: the daemon's own tests (daemon_connection_test) run the clock.
#include "daemon/peer.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>

namespace memd::daemon {
namespace {

using Clock = PeerTable::Clock;
using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::nanoseconds;

constexpr auto kHandshake = minutes(10);
constexpr auto kIdle = hours(1);

ConnectionLimits limits(Clock::duration idle = kIdle) {
  ConnectionLimits l;
  l.handshake_timeout = kHandshake;
  l.idle_timeout = idle;
  return l;
}

// A connection in the table: `server` as gRPC would hold it, `client` the
// peer's end, which reads end of file once the table shuts it down.
struct Connection {
  int server = -1, client = -1;
  std::string name;  // gRPC's peer name

  explicit Connection(PeerTable* table) {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    server = fds[0];
    client = fds[1];
    name = "fd:" + std::to_string(server);
    EXPECT_TRUE(table->add(server, dup(server), Peer{1, 1000, 1000}).ok());
  }
  ~Connection() {
    close(server);
    close(client);
  }
  bool shut_down() const {
    char c;
    return recv(client, &c, 1, MSG_DONTWAIT) == 0;
  }
};

TEST(PeerTable, AConnectionThatSpokeIsShutDownIdleTimeoutAfterItsLastCall) {
  PeerTable table(limits());
  Connection c(&table);
  ASSERT_TRUE(table.find(c.name));
  Clock::time_point before = Clock::now();
  { ConnectionCall call(&table, c.name); }
  Clock::time_point after = Clock::now();

  Swept early = table.sweep(before + kIdle - nanoseconds(1));
  EXPECT_EQ(early.idle, 0u);
  EXPECT_FALSE(c.shut_down());
  EXPECT_GE(early.next, before + kIdle);  // its deadline, not the handshake's
  EXPECT_LE(early.next, after + kIdle);

  Swept due = table.sweep(after + kIdle);
  EXPECT_EQ(due.idle, 1u);
  EXPECT_EQ(due.silent, 0u);
  EXPECT_TRUE(c.shut_down());
  EXPECT_EQ(due.next, Clock::time_point::max());
  EXPECT_EQ(table.sweep(after + 2 * kIdle).idle, 0u) << "shut down once";
  EXPECT_EQ(table.idle_total(), 1u);
  EXPECT_EQ(table.size(), 0u) << "its watch hung up";
}

TEST(PeerTable, ACallInProgressKeepsAConnectionOpenAndItsEndCountsAsActivity) {
  PeerTable table(limits());
  Connection c(&table);
  ASSERT_TRUE(table.find(c.name));
  auto stream = std::make_unique<ConnectionCall>(&table, c.name);  // a session stream
  Clock::time_point later = Clock::now() + 100 * kIdle;
  Swept swept = table.sweep(later);
  EXPECT_EQ(swept.idle, 0u);
  EXPECT_FALSE(c.shut_down());
  EXPECT_EQ(swept.next, later + kIdle) << "no earlier than idle-timeout after its call could end";

  // The stream ends: idle from then on.
  Clock::time_point before = Clock::now();
  stream.reset();
  EXPECT_EQ(table.sweep(before + kIdle - nanoseconds(1)).idle, 0u);
  EXPECT_FALSE(c.shut_down());
  EXPECT_EQ(table.sweep(Clock::now() + kIdle).idle, 1u);
  EXPECT_TRUE(c.shut_down());
}

TEST(PeerTable, AConnectionThatNeverSpokeIsShutDownAtItsHandshakeDeadlineEvenWithACallInProgress) {
  PeerTable table(limits());
  Clock::time_point before = Clock::now();
  Connection c(&table);
  Clock::time_point after = Clock::now();
  ConnectionCall stream(&table, c.name);  // a session stream that never sends its hello
  Swept early = table.sweep(before + kHandshake - nanoseconds(1));
  EXPECT_EQ(early.silent, 0u);
  EXPECT_GE(early.next, before + kHandshake);
  EXPECT_LE(early.next, after + kHandshake);
  Swept due = table.sweep(after + kHandshake);
  EXPECT_EQ(due.silent, 1u);
  EXPECT_EQ(due.idle, 0u);
  EXPECT_TRUE(c.shut_down());
  EXPECT_EQ(table.silent_total(), 1u);
}

TEST(PeerTable, TheNextDeadlineIsTheEarliestOfEveryConnection) {
  PeerTable table(limits());
  Connection silent(&table);
  Connection spoke(&table);
  ASSERT_TRUE(table.find(spoke.name));
  { ConnectionCall call(&table, spoke.name); }
  Clock::time_point now = Clock::now();
  // The silent one's handshake deadline (10 min) comes before the other's
  // idle one (1 h); once it is shut down, the idle one is next.
  Swept first = table.sweep(now);
  EXPECT_LE(first.next, now + kHandshake);
  Swept second = table.sweep(now + kHandshake);
  EXPECT_EQ(second.silent, 1u);
  EXPECT_GT(second.next, now + kHandshake);
  EXPECT_LE(second.next, now + kIdle);
  EXPECT_FALSE(spoke.shut_down());
}

// With an idle-timeout shorter than the handshake-timeout, a sweep must not
// sleep until a new connection's handshake deadline: it may speak at once
// and be idle long before.
TEST(PeerTable, ANewConnectionIsLookedAtAgainNoLaterThanIdleTimeoutFromNow) {
  ConnectionLimits l;
  l.handshake_timeout = kIdle;   // 1 h
  l.idle_timeout = kHandshake;   // 10 min
  PeerTable table(l);
  Connection c(&table);
  Clock::time_point now = Clock::now();
  Swept swept = table.sweep(now);
  EXPECT_EQ(swept.next, now + l.idle_timeout);
  // It speaks, and is idle by then.
  ASSERT_TRUE(table.find(c.name));
  { ConnectionCall call(&table, c.name); }
  Swept due = table.sweep(Clock::now() + l.idle_timeout);
  EXPECT_EQ(due.idle, 1u);
  EXPECT_TRUE(c.shut_down());
}

TEST(PeerTable, ZeroIdleTimeoutIsNever) {
  PeerTable table(limits(Clock::duration::zero()));
  Connection c(&table);
  ASSERT_TRUE(table.find(c.name));
  { ConnectionCall call(&table, c.name); }
  Swept swept = table.sweep(Clock::now() + 1000 * kIdle);
  EXPECT_EQ(swept.idle, 0u);
  EXPECT_EQ(swept.next, Clock::time_point::max());
  EXPECT_FALSE(c.shut_down());
}

// A call outlives its connection, whose descriptor number goes to a new
// one: the call's end is not counted on the new connection.
TEST(PeerTable, ACallEndingAfterItsConnectionDoesNotTouchTheNextOnTheSameNumber) {
  PeerTable table(limits());
  auto old = std::make_unique<Connection>(&table);
  ASSERT_TRUE(table.find(old->name));
  std::string name = old->name;
  int server = old->server;
  auto call = std::make_unique<ConnectionCall>(&table, name);
  // The number is reused: the table hears of a new connection on it.
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  ASSERT_TRUE(table.add(server, dup(fds[0]), Peer{2, 1000, 1000}).ok());
  ASSERT_TRUE(table.find(name));
  auto newer = std::make_unique<ConnectionCall>(&table, name);  // the new connection's stream
  call.reset();  // the old call ends: the new connection's stream is still in progress
  EXPECT_EQ(table.sweep(Clock::now() + 100 * kIdle).idle, 0u);
  char c;
  EXPECT_EQ(recv(fds[1], &c, 1, MSG_DONTWAIT), -1) << "the new connection was shut down";
  newer.reset();
  close(fds[0]);
  close(fds[1]);
}

}  // namespace
}  // namespace memd::daemon
