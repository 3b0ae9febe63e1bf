// memd serving real client processes: regions shared through the daemon,
// clients killed while holding leases, bad requests.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>

#include "client/daemon_client.h"
#include "client/daemon_connection.h"
#include "tests/daemon/daemon_process.h"

namespace memd {
namespace {

using testing::DaemonProcess;
using testing::spawn_process;
using testing::wait_exit;

std::unique_ptr<Client> connect_to(const DaemonProcess& d) {
  ClientOptions o;
  o.socket = d.socket();
  o.program = "daemon_service_test";
  absl::StatusOr<std::unique_ptr<Client>> c = Client::connect(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

OpenOptions shm_options() {
  OpenOptions o;
  o.discipline = Discipline::kShm;
  o.max_bytes = size_t{256} << 20;
  return o;
}

int run_client(const DaemonProcess& d, std::vector<std::string> args) {
  std::vector<std::string> argv = {TEST_CLIENT};
  // options first, then socket
  size_t opts = 0;
  while (opts < args.size() && args[opts].rfind("--", 0) == 0) {
    argv.push_back(args[opts]);
    if (args[opts] == "--uid" || args[opts] == "--mode") argv.push_back(args[++opts]);
    ++opts;
  }
  argv.push_back(d.socket());
  argv.insert(argv.end(), args.begin() + static_cast<long>(opts), args.end());
  pid_t pid = spawn_process(argv, d.dir() + "/clients.log");
  return wait_exit(pid);
}

TEST(DaemonService, ClientsShareARegionThroughTheDaemon) {
  DaemonProcess d;
  ASSERT_TRUE(d.running()) << d.log();
  std::unique_ptr<Client> c = connect_to(d);
  ASSERT_NE(c, nullptr);
  absl::StatusOr<std::unique_ptr<Region>> r = c->open("shared", shm_options());
  ASSERT_TRUE(r.ok()) << r.status();
  // Four processes allocate and publish; this one reads what they wrote.
  std::vector<pid_t> kids;
  for (int id = 1; id <= 4; ++id) {
    kids.push_back(spawn_process({TEST_CLIENT, d.socket(), "shared", "fill", std::to_string(id), "500", "100"},
                                 d.dir() + "/clients.log"));
  }
  for (pid_t k : kids) EXPECT_EQ(wait_exit(k), 0) << d.log();
  for (int id = 1; id <= 4; ++id) {
    EXPECT_EQ(run_client(d, {"shared", "verify", std::to_string(id), "500", "100"}), 0);
  }
  // Objects of dead processes are freed by a live one.
  for (int id = 1; id <= 4; ++id) {
    EXPECT_EQ(run_client(d, {"shared", "free", std::to_string(id), "500", "100"}), 0);
  }
  EXPECT_TRUE((*r)->check().ok());
  void* p = (*r)->alloc(64);
  ASSERT_NE(p, nullptr);
  (*r)->free(p);
  EXPECT_GT(c->lease_calls(), 0u);
}

}  // namespace
}  // namespace memd
