// memd through its daemon as one more family of bench_shared_heap (see
// shared_heap.h):
//
//   memd-daemon   a shm region served by memd (DISCIPLINE_SHM): every worker
//                 connects with its own memd::Client (gRPC over the daemon's
//                 Unix socket), opens the region and allocates from blocks it
//                 leases from the daemon
//
// It is the `memd-shm` family with the daemon in place of the parent as the
// region's owner: the same loop, the same heap, blocks leased over gRPC
// instead of the owner's plain Unix socket. shared_small only.
//
// The daemon: --daemon-socket names a running memd; without it the parent
// starts one for the run (--memd, else the memd built with this program)
// with everything under --dir, and stops it at the end.
//
// gRPC is not fork-safe, and the parent forks the workers: the parent never
// makes a gRPC call itself. It creates the region (and stores the token) in
// a short-lived helper child, which also tells it the shm object the daemon
// maps, so that the parent can map the region read-only, without gRPC, for
// its own view (used_bytes, hence shared_check). Removing the region at the
// end goes through a helper child too.
//
// Nothing is made durable on the allocation path (tmpfs, as memd-shm).
#include <sys/wait.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <string>

#include "client/daemon_client.h"
#include "client/daemon_connection.h"
#include "memd/v1/memd.grpc.pb.h"
#include "memd_daemon_process.h"
#include "shared_heap.h"

namespace shb {
namespace {

constexpr const char* kTokenRoot = "memd_bench_token";

std::unique_ptr<memd::Client> connect_or_fail(const std::string& socket) {
  memd::ClientOptions co;
  co.socket = socket;
  co.program = "bench_shared_heap";
  auto client = memd::Client::connect(co);
  if (!client.ok()) fail("memd::Client::connect " + socket + ": " + client.status().ToString());
  return std::move(client).value();
}

// Runs `job` in a forked child (which may use gRPC: it exits right after)
// and returns what the job returned; nothing if the child failed (it said
// why on stderr).
std::optional<std::string> in_child(const std::function<std::string()>& job) {
  int out[2];
  if (pipe(out) != 0) fail("pipe", true);
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) fail("fork", true);
  if (pid == 0) {
    close(out[0]);
    std::string said = job();
    const char* p = said.data();
    size_t n = said.size();
    while (n > 0) {
      ssize_t w = write(out[1], p, n);
      if (w <= 0) _exit(1);
      p += w;
      n -= static_cast<size_t>(w);
    }
    _exit(0);  // no atexit handlers of the parent in the child
  }
  close(out[1]);
  std::string got;
  char buf[512];
  for (ssize_t r; (r = read(out[0], buf, sizeof buf)) != 0;) {
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("read from a pipe", true);
    got.append(buf, static_cast<size_t>(r));
  }
  close(out[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return got;
}

class DaemonHeap final : public Heap {
 public:
  DaemonHeap(std::unique_ptr<memd::Client> client, std::unique_ptr<memd::Region> region)
      : client_(std::move(client)), region_(std::move(region)) {}
  ~DaemonHeap() override { region_.reset(); }  // the client must outlive its regions

  void* alloc(uint32_t, size_t size) override { return region_->alloc(size); }
  void free(uint32_t, void* p) override { region_->free(p); }
  uint64_t offset(const void* p) const override { return region_->offset_of(p); }
  uint64_t token() const override {
    const uint64_t* t = region_->find<uint64_t>(kTokenRoot);
    return t != nullptr ? *t : 0;
  }
  int64_t remote_calls() const override { return static_cast<int64_t>(client_->lease_calls()); }

 private:
  std::unique_ptr<memd::Client> client_;
  std::unique_ptr<memd::Region> region_;
};

class DaemonFamily final : public Family {
 public:
  explicit DaemonFamily(const Config& c) : config_(c), name_(c.stem) {
    if (c.workload != "shared_small") fail("memd-daemon runs the shared_small workload only");
  }

  void create(uint64_t token) override {
    socket_ = config_.daemon_socket;
    if (socket_.empty()) {
      std::string binary = config_.memd_binary.empty() ? MEMD_DAEMON_BINARY : config_.memd_binary;
      // The namespace starts like the benchmark's own names, so that a
      // runner sweeping leftovers of killed runs finds its objects too.
      std::string problem = daemon_.start(binary, config_.dir + "/" + config_.stem + ".memd", config_.stem + "-d");
      if (!problem.empty()) {
        daemon_.stop();  // one that started but never answered, and its directory
        fail(problem);
      }
      started_ = true;
      socket_ = daemon_.socket();
    }
    const size_t heap_bytes = config_.heap_bytes;
    const uint32_t clients = static_cast<uint32_t>(std::max(64, config_.workers + 1));
    std::optional<std::string> object = in_child([&] {
      std::unique_ptr<memd::Client> client = connect_or_fail(socket_);
      memd::OpenOptions o;
      o.discipline = memd::Discipline::kShm;
      o.exclusive = true;
      o.max_bytes = heap_bytes;
      o.max_clients = clients;
      auto region = client->open(name_, o);
      if (!region.ok()) fail("memd: open " + name_ + ": " + region.status().ToString());
      if ((*region)->find_or_construct<uint64_t>(kTokenRoot, token) == nullptr) fail("the token root");
      region->reset();
      return object_name(*client);
    });
    if (!object) stop_and_fail("a helper process could not create the region in memd");
    created_ = true;
    auto view = memd::Region::attach(*object, memd::Discipline::kShm, "", /*read_only=*/true);
    if (!view.ok()) stop_and_fail("Region::attach (read-only) " + *object + ": " + view.status().ToString());
    view_ = std::move(view).value();
  }

  std::unique_ptr<Heap> open(int) override {
    std::unique_ptr<memd::Client> client = connect_or_fail(socket_);
    memd::OpenOptions o;
    o.discipline = memd::Discipline::kShm;
    o.create = false;
    auto region = client->open(name_, o);
    if (!region.ok()) fail("memd: open " + name_ + ": " + region.status().ToString());
    return std::make_unique<DaemonHeap>(std::move(client), std::move(region).value());
  }

  // Usable bytes of live objects, in the parent's read-only view.
  int64_t used_bytes() override { return view_ ? static_cast<int64_t>(view_->stat().busy_bytes) : -1; }

  void remove() override {
    view_.reset();
    if (created_) {
      created_ = false;
      bool removed = in_child([&] {
                       std::unique_ptr<memd::Client> client = connect_or_fail(socket_);
                       remove_region(*client);
                       return std::string();
                     }).has_value();
      if (!removed) std::fprintf(stderr, "bench_shared_heap: memd-daemon: region %s not removed\n", name_.c_str());
    }
    if (started_) {
      started_ = false;
      daemon_.stop();
    }
  }

 private:
  // The parent has not handed the family to fail() yet: clean up here.
  [[noreturn]] void stop_and_fail(const std::string& what) {
    remove();
    fail(what);
  }

  // The shm object the daemon keeps the region in (what Region::attach takes).
  std::string object_name(memd::Client& client) {
    auto cur = client.connection()->current();
    if (!cur.ok()) fail("memd: no session: " + cur.status().ToString());
    memd::v1::StatRegionRequest req;
    req.set_name(name_);
    memd::v1::RegionInfo info;
    grpc::ClientContext ctx;
    client.connection()->set_deadline(&ctx);
    grpc::Status s = cur->regions->Stat(&ctx, req, &info);
    if (!s.ok()) fail("memd: Regions.Stat " + name_ + ": " + s.error_message());
    return info.object_path();
  }

  void remove_region(memd::Client& client) {
    auto cur = client.connection()->current();
    if (!cur.ok()) fail("memd: no session: " + cur.status().ToString());
    memd::v1::RemoveRegionRequest req;
    req.set_session(cur->session);
    req.set_name(name_);
    memd::v1::RemoveRegionResponse resp;
    grpc::ClientContext ctx;
    client.connection()->set_deadline(&ctx);
    grpc::Status s = cur->regions->Remove(&ctx, req, &resp);
    if (!s.ok()) fail("memd: Regions.Remove " + name_ + ": " + s.error_message());
  }

  Config config_;
  std::string name_;
  std::string socket_;
  MemdProcess daemon_;
  bool started_ = false;  // this run started the daemon (and stops it)
  bool created_ = false;  // the region exists in the daemon
  std::unique_ptr<memd::Region> view_;
};

std::unique_ptr<Family> make(const Config& c) { return std::make_unique<DaemonFamily>(c); }

const Registration daemon{{"memd-daemon", "memd::Client over memd (the daemon), Discipline::kShm", make}};

}  // namespace
}  // namespace shb
