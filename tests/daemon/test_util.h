// Shared bits of the daemon tests: connecting, running test_client
// processes, waiting for a condition with a generous bound.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "client/daemon_client.h"
#include "region/region_internals.h"
#include "gtest/gtest.h"
#include "tests/daemon/daemon_process.h"

namespace memd::testing {

inline std::unique_ptr<Client> connect_to(const DaemonProcess& d) {
  ClientOptions o;
  o.socket = d.socket();
  o.program = "daemon test";
  absl::StatusOr<std::unique_ptr<Client>> c = Client::connect(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

inline OpenOptions region_options(Discipline d = Discipline::kShm) {
  OpenOptions o;
  o.discipline = d;
  o.max_bytes = size_t{256} << 20;
  return o;
}

// test_client with `options` (e.g. --file, --uid N), then the socket, then `args`.
inline pid_t start_client(const DaemonProcess& d, const std::vector<std::string>& options,
                          const std::vector<std::string>& args, const std::string& log = "") {
  std::vector<std::string> argv = {TEST_CLIENT};
  argv.insert(argv.end(), options.begin(), options.end());
  argv.push_back(d.socket());
  argv.insert(argv.end(), args.begin(), args.end());
  return spawn_process(argv, log.empty() ? d.dir() + "/clients.log" : log);
}

inline int run_client(const DaemonProcess& d, const std::vector<std::string>& options,
                      const std::vector<std::string>& args) {
  pid_t pid = start_client(d, options, args);
  return pid > 0 ? wait_exit(pid) : -1;  // wait_exit(-1) would wait for any child
}

// Polls `done` every 10 ms for up to `limit`; true if it came true.
// Blocks the region's lease slots of process `pid` hold (its thread heaps'
// and its stash), as the region records them.
inline uint64_t blocks_of(Region& r, pid_t pid) {
  const heap::Region& hr = RegionInternals::of(r)->region;
  uint64_t n = 0;
  for (uint32_t i = 0; i < hr.header->max_clients; ++i) {
    const heap::LeaseSlot& l = hr.leases[i];
    if (l.state.load() == heap::LeaseState::kActive && l.pid == pid) n += l.blocks.load();
  }
  return n;
}

inline bool eventually(const std::function<bool()>& done, std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// The exit code test_client gives for a failed call with `code`.
inline int client_status_exit(absl::StatusCode code) { return 10 + static_cast<int>(code); }

}  // namespace memd::testing
