// SIGTERM: health says NOT_SERVING at once, to watchers and pollers alike,
// before the daemon exits; a connected client's session does not hold the
// shutdown up to its drain bound (its stream is ended, its leases kept).
// A health watcher's own stream does (as any call in progress): up to the
// drain bound.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>

#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/daemon/test_util.h"

namespace memd {
namespace {

using namespace memd::testing;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

TEST(DaemonShutdown, HealthSaysNotServingAndAClientDoesNotHoldTheDaemonUp) {
  constexpr int kDrain = 30;  // seconds: far longer than a shutdown takes
  DaemonProcess d({"--drain-timeout", std::to_string(kDrain)});
  ASSERT_TRUE(d.running()) << d.log();
  // A client process with a session and a lease, holding them.
  std::string held = d.dir() + "/holder.log";
  pid_t holder = start_client(d, {}, {"kept", "hold", "1", "100", "32"}, held);
  ASSERT_TRUE(eventually([&] { return read_file(held).find("ready") != std::string::npos; })) << read_file(held);

  auto channel = grpc::CreateChannel("unix:" + d.socket(), grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext watch;
  watch.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(kDrain + 30));
  auto watcher = health->Watch(&watch, HealthCheckRequest());
  HealthCheckResponse r;
  ASSERT_TRUE(watcher->Read(&r));
  EXPECT_EQ(r.status(), HealthCheckResponse::SERVING);

  auto signalled = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(d.pid(), SIGTERM), 0);
  bool not_serving = false;
  while (!not_serving && watcher->Read(&r)) not_serving = r.status() == HealthCheckResponse::NOT_SERVING;
  // A watch is a call in progress too (one that never ends): it would hold
  // the daemon up to its drain bound. This watcher has heard what it wanted.
  watch.TryCancel();
  (void)watcher->Finish();
  watcher.reset();
  health.reset();
  channel.reset();  // and its connection
  EXPECT_TRUE(not_serving) << "the watcher never heard NOT_SERVING\n" << d.log();
  EXPECT_EQ(d.stop(), 0) << d.log();
  // Liveness, not timing: the session stream was ended, not waited for.
  EXPECT_LT(std::chrono::steady_clock::now() - signalled, std::chrono::seconds(kDrain)) << d.log();
  EXPECT_NE(d.log().find("stopped"), std::string::npos) << d.log();
  kill(holder, SIGKILL);
  wait_exit(holder);
}

}  // namespace
}  // namespace memd
