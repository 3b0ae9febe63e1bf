#include "client/daemon_connection.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "client/telemetry/sampler.h"
#include "heap/region_format.h"
#include "region/lease_service.h"

namespace memd::client {
namespace {

using Clock = std::chrono::steady_clock;

// Calls made by the session thread itself (a drain) must not wait for a
// reconnect that only this thread can make.
thread_local bool on_session_thread = false;

std::string program_name() {
  char buf[256];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "?";
  buf[n] = '\0';
  const char* slash = std::strrchr(buf, '/');
  return slash != nullptr ? slash + 1 : buf;
}

// Fixed for the life of this program image (an exec makes a new one).
uint64_t image_id() {
  static const uint64_t id = heap::random_secret() | 1;
  return id;
}

std::atomic<void (*)()> guard_enter{nullptr};
std::atomic<void (*)()> guard_leave{nullptr};

}  // namespace

void set_rpc_guard(void (*enter)(), void (*leave)()) {
  guard_leave.store(leave);
  guard_enter.store(enter);
}

RpcGuard::RpcGuard() {
  if (auto f = guard_enter.load(std::memory_order_acquire)) f();
}
RpcGuard::~RpcGuard() {
  if (auto f = guard_leave.load(std::memory_order_acquire)) f();
}

absl::Status from_grpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

absl::StatusOr<std::shared_ptr<DaemonConnection>> DaemonConnection::connect(const ClientOptions& options) {
  std::shared_ptr<DaemonConnection> c(new DaemonConnection(options));
  if (c->options_.socket.empty()) c->options_.socket = Client::default_socket();
  if (c->options_.program.empty()) c->options_.program = program_name();
  apply_telemetry_environment(&c->options_.telemetry);
  if (c->options_.telemetry.enabled && c->options_.telemetry.sample_bytes > 0) {
    telemetry::enable_sampling(c->options_.telemetry.sample_bytes);
  }
  struct stat st {};
  if (stat(c->options_.socket.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) {
    return absl::UnavailableError(absl::StrCat("memd is not running: no socket at ", c->options_.socket,
                                               " (start it with `memd`, or set MEMD_SOCKET)"));
  }
  if (absl::Status s = c->open_session(); !s.ok()) return s;
  c->thread_ = std::thread([p = c.get()] { p->run(); });
  if (c->options_.telemetry.enabled) c->telemetry_thread_ = std::thread([p = c.get()] { p->report_loop(); });
  return c;
}

DaemonConnection::~DaemonConnection() {
  // The counts since the last report would end with the session.
  bool reported = flush_telemetry(kLastReportWait);
  {
    std::lock_guard<std::mutex> g(mu_);
    closing_ = true;
  }
  changed_.notify_all();
  if (telemetry_thread_.joinable()) telemetry_thread_.join();
  if (reported) {
    // End the session by closing our side, so that the daemon reads the last
    // report before it sees the end (a cancel may overtake it). Bounded: the
    // cancel below ends it anyway.
    {
      std::lock_guard<std::mutex> w(write_mu_);  // the stream stays while held
      bool up;
      {
        std::lock_guard<std::mutex> g(mu_);
        up = connected_;
      }
      if (up) stream_->WritesDone();
    }
    std::unique_lock<std::mutex> g(mu_);
    changed_.wait_for(g, kLastReportWait, [&] { return !connected_; });
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    if (stream_ctx_) stream_ctx_->TryCancel();
  }
  if (thread_.joinable()) thread_.join();
}

absl::Status DaemonConnection::open_session() {
  auto channel = grpc::CreateChannel("unix:" + options_.socket, grpc::InsecureChannelCredentials());
  auto sessions = v1::Sessions::NewStub(channel);
  auto ctx = std::make_unique<grpc::ClientContext>();
  auto stream = sessions->Open(ctx.get());
  v1::SessionRequest req;
  v1::Hello* hello = req.mutable_hello();
  hello->set_pid(getpid());
  hello->set_start_time(region::process_start_time(getpid()));
  hello->set_program(options_.program);
  hello->set_client_version(1);
  hello->set_image_id(image_id());
  std::vector<RegionLink*> resumed;
  {
    std::lock_guard<std::mutex> g(links_mu_);
    for (RegionLink* l : links_) {
      v1::ResumeLease* r = hello->add_resume();
      r->set_region(l->name);
      r->set_lease_slot(l->slot);
      resumed.push_back(l);
    }
  }
  v1::SessionEvent ev;
  if (!stream->Write(req) || !stream->Read(&ev) || !ev.has_welcome()) {
    grpc::Status s = stream->Finish();
    if (s.ok()) s = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the daemon sent no welcome");
    absl::Status st = from_grpc(s);
    if (absl::IsUnavailable(st)) {
      return absl::UnavailableError(absl::StrCat("cannot reach memd at ", options_.socket, ": ", st.message()));
    }
    return st;
  }
  const v1::Welcome& w = ev.welcome();
  for (size_t i = 0; i < resumed.size(); ++i) {
    uint32_t h = i < static_cast<size_t>(w.resumed_handles_size()) ? w.resumed_handles(static_cast<int>(i)) : 0;
    resumed[i]->handle.store(h);
  }
  std::lock_guard<std::mutex> writing(write_mu_);
  std::lock_guard<std::mutex> g(mu_);
  if (regions_stub_) retired_.push_back(std::shared_ptr<void>(std::move(regions_stub_)));
  if (leases_stub_) retired_.push_back(std::shared_ptr<void>(std::move(leases_stub_)));
  if (sessions_stub_) retired_.push_back(std::shared_ptr<void>(std::move(sessions_stub_)));
  channel_ = channel;
  sessions_stub_ = std::move(sessions);
  regions_stub_ = v1::Regions::NewStub(channel);
  leases_stub_ = v1::Leases::NewStub(channel);
  stream_ = std::move(stream);
  stream_ctx_ = std::move(ctx);
  session_ = w.session();
  // A reconnection that raced the destructor: it cancelled the stream it
  // found, before this one was installed; this one ends at once instead of
  // keeping the session thread reading it, and the destructor joining that
  // thread, forever.
  if (closing_) stream_ctx_->TryCancel();
  ++epoch_;
  connected_ = true;
  sessions_opened.fetch_add(1);
  changed_.notify_all();
  return absl::OkStatus();
}

void DaemonConnection::run() {
  on_session_thread = true;
  for (;;) {
    grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionEvent>* stream;
    {
      std::lock_guard<std::mutex> g(mu_);
      stream = stream_.get();
    }
    v1::SessionEvent ev;
    while (stream->Read(&ev)) {
      if (!ev.has_command() || ev.command().kind() != v1::COMMAND_DRAIN) continue;
      std::lock_guard<std::mutex> g(links_mu_);
      for (RegionLink* l : links_) {
        if ((ev.command().region() == 0 || ev.command().region() == l->handle.load()) && l->drain) l->drain();
      }
    }
    {
      std::lock_guard<std::mutex> w(write_mu_);
      {
        std::lock_guard<std::mutex> g(mu_);
        connected_ = false;
      }
      changed_.notify_all();
      (void)stream->Finish();
    }
    {
      std::unique_lock<std::mutex> g(mu_);
      if (closing_) return;
    }
    // The daemon went away: reconnect with backoff, resuming every lease.
    auto delay = std::chrono::milliseconds(20);
    for (;;) {
      {
        std::unique_lock<std::mutex> g(mu_);
        changed_.wait_for(g, delay, [&] { return closing_; });
        if (closing_) return;
      }
      if (open_session().ok()) break;
      delay = std::min(delay * 2, std::chrono::milliseconds(500));
    }
  }
}

absl::StatusOr<DaemonConnection::Current> DaemonConnection::current() {
  rpcs.fetch_add(1, std::memory_order_relaxed);
  std::unique_lock<std::mutex> g(mu_);
  if (!connected_ && !on_session_thread) {
    changed_.wait_for(g, options_.reconnect_timeout, [&] { return connected_ || closing_; });
  }
  if (!connected_) {
    return absl::UnavailableError(absl::StrCat("memd at ", options_.socket, " is not reachable"));
  }
  return Current{session_, epoch_, regions_stub_.get(), leases_stub_.get()};
}

void DaemonConnection::await_reconnect(uint64_t epoch) {
  if (on_session_thread) return;
  std::unique_lock<std::mutex> g(mu_);
  changed_.wait_for(g, options_.reconnect_timeout, [&] { return (connected_ && epoch_ != epoch) || closing_; });
}

void DaemonConnection::add(RegionLink* link) {
  std::lock_guard<std::mutex> g(links_mu_);
  links_.insert(link);
}

void DaemonConnection::remove(RegionLink* link) {
  std::lock_guard<std::mutex> g(links_mu_);
  links_.erase(link);
}

void DaemonConnection::set_drain(RegionLink* link, std::function<void()> drain) {
  std::lock_guard<std::mutex> g(links_mu_);
  link->drain = std::move(drain);
}

void DaemonConnection::set_deadline(grpc::ClientContext* ctx) const {
  ctx->set_deadline(std::chrono::system_clock::now() + options_.call_deadline);
}

}  // namespace memd::client
