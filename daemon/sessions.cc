#include "daemon/sessions.h"

#include <time.h>

#include "absl/strings/str_cat.h"
#include "region/lease_service.h"
#include "daemon/clock.h"
#include "daemon/log.h"

namespace memd::daemon {
namespace {


bool alive(pid_t pid, uint64_t start_time) { return region::process_start_time(pid) == start_time; }

// How often orphaned leases are looked at: a dead client's blocks are
// abandoned well within a second of its death.
constexpr auto kReapInterval = std::chrono::milliseconds(100);

}  // namespace

SessionTable::SessionTable(const DaemonConfig& config, RegionRegistry* regions) : config_(config), regions_(regions) {
  reaper_ = std::thread([this] { reap_loop(); });
}

SessionTable::~SessionTable() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  reaper_.join();
}

absl::StatusOr<std::shared_ptr<Session>> SessionTable::open(const Peer& peer, const std::string& connection,
                                                            const v1::Hello& hello,
                                                            std::function<void(const v1::Command&)> send,
                                                            v1::Welcome* welcome, std::function<void()> cancel) {
  if (hello.pid() != peer.pid) {
    return absl::PermissionDeniedError(absl::StrCat("the hello claims pid ", hello.pid(), " but the connection is pid ",
                                                    peer.pid, " (SO_PEERCRED)"));
  }
  if (hello.start_time() == 0 || region::process_start_time(peer.pid) != hello.start_time()) {
    return absl::PermissionDeniedError(absl::StrCat("start time ", hello.start_time(), " is not that of pid ", peer.pid));
  }
  if (hello.client_version() != 1) {
    return absl::FailedPreconditionError(absl::StrCat("client protocol version ", hello.client_version(),
                                                      "; this daemon speaks 1"));
  }
  auto s = std::make_shared<Session>();
  s->peer = peer;
  s->connection = connection;
  s->start_time = hello.start_time();
  s->image_id = hello.image_id();
  s->program = hello.program().substr(0, 200);
  s->connected_ms = wall_ms();
  s->send = std::move(send);
  s->cancel = std::move(cancel);
  std::lock_guard<std::mutex> g(mu_);
  if (shutting_down_) return absl::UnavailableError("the daemon is shutting down");
  if (sessions_.size() >= config_.max_sessions) {
    return absl::ResourceExhaustedError(absl::StrCat(sessions_.size(), " sessions are open, the limit (max-sessions)"));
  }
  if (absl::Status limit = check_user_limits_locked(peer, hello.start_time()); !limit.ok()) return limit;
  s->id = next_id_++;
  for (const v1::ResumeLease& r : hello.resume()) {
    uint32_t handle = 0;
    for (auto it = orphans_.begin(); it != orphans_.end(); ++it) {
      if (it->region->record.name != r.region() || it->slot != r.lease_slot() || it->pid != peer.pid ||
          it->start_time != hello.start_time()) {
        continue;
      }
      handle = it->region->handle;
      // The orphan's place in the region's count becomes the session's.
      s->attached[handle] = Attachment{it->region, it->slot};
      s->ever_attached.insert(it->region->record.name);
      log_info("session ", s->id, " (pid ", peer.pid, ") resumed its lease ", it->slot, " in region \"",
               r.region(), "\"");
      orphans_.erase(it);
      break;
    }
    welcome->add_resumed_handles(handle);
  }
  // Leases the same process left under an earlier program image: exec
  // replaced that image and its mappings, so nobody uses those blocks.
  bool any_replaced = false;
  for (Orphan& o : orphans_) {
    if (o.pid == peer.pid && o.start_time == hello.start_time() && o.image_id != 0 && hello.image_id() != 0 &&
        o.image_id != hello.image_id()) {
      o.replaced = true;  // the reaper takes it back at once, outside this lock
      any_replaced = true;
    }
  }
  if (any_replaced) wake_.notify_all();
  sessions_[s->id] = s;
  sessions_total_.fetch_add(1);
  welcome->set_session(s->id);
  log_info("session ", s->id, " opened: pid ", peer.pid, ", uid ", peer.uid, ", program \"", s->program, "\"");
  return s;
}

absl::Status SessionTable::check_user_limits_locked(const Peer& peer, uint64_t start_time) const {
  if (peer.uid == 0) return absl::OkStatus();  // root: the global limit only
  uint32_t of_uid = 0, of_process = 0;
  for (const auto& [id, s] : sessions_) {
    of_uid += s->peer.uid == peer.uid;
    of_process += s->peer.pid == peer.pid && s->start_time == start_time;
  }
  if (of_process >= config_.max_sessions_per_process) {
    return absl::ResourceExhaustedError(absl::StrCat("pid ", peer.pid, " has ", of_process,
                                                     " sessions open, the limit (max-sessions-per-process)"));
  }
  if (of_uid >= config_.max_sessions_per_uid) {
    return absl::ResourceExhaustedError(absl::StrCat("uid ", peer.uid, " has ", of_uid,
                                                     " sessions open, the limit (max-sessions-per-uid)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Session>> SessionTable::find(uint64_t id, const std::string& connection) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = sessions_.find(id);
  // UNAUTHENTICATED: the session is the caller's credential. A client of a
  // daemon that restarted sees it and waits for its new session.
  if (it == sessions_.end()) return absl::UnauthenticatedError(absl::StrCat("no session ", id, " (open one first)"));
  if (it->second->connection != connection) {
    return absl::UnauthenticatedError(absl::StrCat("session ", id, " belongs to another connection"));
  }
  it->second->rpcs.fetch_add(1, std::memory_order_relaxed);
  return it->second;
}

absl::StatusOr<Attachment> SessionTable::attach(Session& s, const std::shared_ptr<ServedRegion>& region,
                                                bool read_only) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (s.attached.count(region->handle) != 0) {
      return absl::AlreadyExistsError(absl::StrCat("session ", s.id, " has region \"", region->record.name,
                                                   "\" open already"));
    }
  }
  Attachment a{region, kNoLeaseSlot};
  {
    // Counted under the region's lock, with the lease: remove() checks the
    // count under the same lock, so it never deletes a region a client is
    // just attaching to.
    std::lock_guard<std::mutex> rg(region->lock);
    if (absl::Status u = region->usable(); !u.ok()) return u;
    if (!read_only) {
      absl::StatusOr<region::ClientLease> lease = region->leases()->register_client(s.peer.pid, s.start_time);
      if (!lease.ok()) return lease.status();
      a.slot = lease->slot;
      // Request ids start again with the new lease: no answer of the
      // slot's last holder may be given to this one.
      if (region->journal) region->journal->clear_slot(a.slot);
    }
    region->attached.fetch_add(1);
  }
  std::lock_guard<std::mutex> g(mu_);
  s.attached[region->handle] = a;
  s.ever_attached.insert(region->record.name);
  return a;
}

absl::StatusOr<Attachment> SessionTable::attachment(const Session& s, uint32_t handle) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = s.attached.find(handle);
  if (it == s.attached.end()) {
    return absl::NotFoundError(absl::StrCat("session ", s.id, " has no region with handle ", handle, " open"));
  }
  return it->second;
}

std::vector<std::pair<uint32_t, Attachment>> SessionTable::attachments(const Session& s) const {
  std::lock_guard<std::mutex> g(mu_);
  return {s.attached.begin(), s.attached.end()};
}

std::set<std::string> SessionTable::ever_attached(const Session& s) const {
  std::lock_guard<std::mutex> g(mu_);
  return s.ever_attached;
}

absl::Status SessionTable::detach(Session& s, uint32_t handle) {
  Attachment a;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = s.attached.find(handle);
    if (it == s.attached.end()) {
      return absl::NotFoundError(absl::StrCat("session ", s.id, " has no region with handle ", handle, " open"));
    }
    a = it->second;
    s.attached.erase(it);
  }
  // A client that closes a region has given its blocks back first; what it
  // still holds is taken back like a dead client's.
  if (a.slot != kNoLeaseSlot) reclaim(a.region, a.slot, s.peer.pid, "closed the region");
  a.region->attached.fetch_sub(1);
  return absl::OkStatus();
}

void SessionTable::reclaim(const std::shared_ptr<ServedRegion>& region, uint32_t slot, pid_t pid, const char* why) {
  std::lock_guard<std::mutex> rg(region->lock);
  if (region->owner == nullptr) return;
  // A damaged region is not touched again, not even to take back: its
  // tables may send the walk anywhere.
  if (absl::Status u = region->usable(); !u.ok()) return;
  uint64_t blocks = region->leases()->blocks_held(slot);
  region->leases()->client_gone(slot);
  log_info("pid ", pid, " ", why, ": lease ", slot, " in region \"", region->record.name, "\" taken back (", blocks,
           " block(s))");
}

void SessionTable::end(uint64_t id) {
  std::shared_ptr<Session> s;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return;
    s = it->second;
    sessions_.erase(it);
    s->send = nullptr;
    s->cancel = nullptr;
  }
  bool dead = !alive(s->peer.pid, s->start_time);
  std::lock_guard<std::mutex> g(mu_);
  if (s->attached.empty()) {
    log_info("session ", id, " of pid ", s->peer.pid, " ended with nothing attached");
  } else {
    log_info("session ", id, " ended: pid ", s->peer.pid,
             dead ? " exited" : " still runs (its leases wait for it to exit or come back)");
  }
  for (auto& [handle, a] : s->attached) {
    if (a.slot == kNoLeaseSlot) {
      a.region->attached.fetch_sub(1);
      continue;
    }
    // Reclaimed by the reaper (at once if the process is dead), unless the
    // process resumes the lease first; at shutdown the next daemon decides.
    // An orphan still holds the region: it keeps its place in the count.
    if (shutting_down_) {
      a.region->attached.fetch_sub(1);
    } else {
      orphans_.push_back(Orphan{a.region, a.slot, s->peer.pid, s->start_time, s->image_id});
    }
  }
  if (dead) wake_.notify_all();
}

void SessionTable::adopt_orphans(const std::vector<KeptLease>& kept) {
  std::lock_guard<std::mutex> g(mu_);
  for (const KeptLease& k : kept) {
    orphans_.push_back(Orphan{k.region, k.lease.slot, k.lease.pid, k.lease.start_time, 0});
    k.region->attached.fetch_add(1);  // the process still maps it: the region is in use
  }
  wake_.notify_all();
}

void SessionTable::shutting_down() {
  std::lock_guard<std::mutex> g(mu_);
  shutting_down_ = true;
  // Under the lock: a session still in the table has a handler that has not
  // reached end(), so the stream it cancels is still there.
  for (const auto& [id, s] : sessions_) {
    if (s->cancel) s->cancel();
  }
}

void SessionTable::reap_loop() {
  std::unique_lock<std::mutex> g(mu_);
  while (!stop_) {
    std::vector<Orphan> gone;
    for (auto it = orphans_.begin(); it != orphans_.end();) {
      if (it->replaced || !alive(it->pid, it->start_time)) {
        gone.push_back(*it);
        it = orphans_.erase(it);
      } else {
        ++it;
      }
    }
    if (!gone.empty()) {
      g.unlock();
      for (const Orphan& o : gone) {
        reclaim(o.region, o.slot, o.pid, o.replaced ? "replaced its program (exec)" : "exited");
        o.region->attached.fetch_sub(1);
        reclaimed_.fetch_add(1);
      }
      g.lock();
      continue;
    }
    wake_.wait_for(g, kReapInterval);
  }
}

std::vector<std::shared_ptr<Session>> SessionTable::list() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<std::shared_ptr<Session>> out;
  for (const auto& [id, s] : sessions_) out.push_back(s);
  return out;
}

uint32_t SessionTable::drain(pid_t pid, const std::string& region) {
  std::lock_guard<std::mutex> g(mu_);
  uint32_t asked = 0;
  for (const auto& [id, s] : sessions_) {
    if (pid != 0 && s->peer.pid != pid) continue;
    uint32_t handle = 0;
    if (!region.empty()) {
      for (const auto& [h, a] : s->attached) {
        if (a.region->record.name == region) handle = h;
      }
      if (handle == 0) continue;
    }
    if (!s->send) continue;
    v1::Command c;
    c.set_kind(v1::COMMAND_DRAIN);
    c.set_region(handle);
    s->send(c);
    ++asked;
  }
  return asked;
}

size_t SessionTable::orphan_count() const {
  std::lock_guard<std::mutex> g(mu_);
  std::set<std::pair<pid_t, uint64_t>> processes;
  for (const Orphan& o : orphans_) processes.insert({o.pid, o.start_time});
  return processes.size();
}

}  // namespace memd::daemon
