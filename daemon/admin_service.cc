// Admin: check and compact regions, drain clients, list clients, daemon
// statistics. Checks and compaction name regions the caller may read;
// draining another user's process needs root.
#include <sys/stat.h>
#include <time.h>

#include "absl/strings/str_cat.h"
#include "daemon/handler.h"
#include "daemon/heap_profile.h"
#include "daemon/metrics.h"
#include "daemon/client_text.h"
#include "daemon/clock.h"
#include "daemon/log.h"
#include "daemon/visibility.h"
#include "daemon/version.h"

namespace memd::daemon {
namespace {


// The regions a request names (empty: all the caller may read).
absl::StatusOr<std::vector<std::shared_ptr<ServedRegion>>> named(DaemonState* state, const Peer& who,
                                                                 const std::string& name) {
  std::vector<std::shared_ptr<ServedRegion>> out;
  if (!name.empty()) {
    std::shared_ptr<ServedRegion> r = state->regions->find(name);
    if (r == nullptr) return absl::NotFoundError(absl::StrCat("no region named ", quote_client_text(name)));
    if (absl::Status s = check_access(r->record, who, false); !s.ok()) return s;
    out.push_back(r);
    return out;
  }
  for (auto& r : state->regions->list()) {
    if (check_access(r->record, who, false).ok()) out.push_back(r);
  }
  return out;
}

uint64_t backing_bytes(const ServedRegion& r) {
  struct stat sb {};
  return stat(object_os_path(r.record).c_str(), &sb) == 0 ? uint64_t(sb.st_blocks) * 512 : 0;
}

}  // namespace

grpc::Status AdminService::Check(grpc::ServerContext* c, const v1::CheckRequest* req, v1::CheckResponse* resp) {
  return handle(state_, __func__, c, std::nullopt, [&](Caller& who) -> absl::Status {
    absl::StatusOr<std::vector<std::shared_ptr<ServedRegion>>> regions = named(state_, who.peer, req->region());
    if (!regions.ok()) return regions.status();
    for (auto& r : *regions) {
      std::lock_guard<std::mutex> g(r->lock);
      absl::Status s = r->usable();
      if (absl::IsNotFound(s)) continue;  // removed meanwhile
      v1::CheckResult* out = resp->add_results();
      out->set_region(r->record.name);
      // Blocks client threads own change under the check: their insides are
      // left out rather than misreported (with no client, none is owned).
      uint32_t skipped = 0;
      if (s.ok()) s = r->owner->check_while_in_use(&skipped);
      // A fault contained during the check means it read zeros: it says so.
      if (absl::Status after = r->usable(); !after.ok()) s = after;
      out->set_blocks_skipped(skipped);
      out->set_ok(s.ok());
      out->set_message(s.ok() ? "ok" : std::string(s.message()));
      if (!s.ok()) log_error("check of region \"", r->record.name, "\" failed: ", s.message());
    }
    return absl::OkStatus();
  });
}

grpc::Status AdminService::Compact(grpc::ServerContext* c, const v1::CompactRequest* req, v1::CompactResponse* resp) {
  return handle(state_, __func__, c, std::nullopt, [&](Caller& who) -> absl::Status {
    absl::StatusOr<std::vector<std::shared_ptr<ServedRegion>>> regions = named(state_, who.peer, req->region());
    if (!regions.ok()) return regions.status();
    uint64_t before = 0, after = 0;
    for (auto& r : *regions) {
      std::lock_guard<std::mutex> g(r->lock);
      if (!r->usable().ok()) continue;
      before += backing_bytes(*r);
      r->owner->compact();
      (void)r->usable();
      after += backing_bytes(*r);
    }
    resp->set_backing_bytes_before(before);
    resp->set_backing_bytes_after(after);
    log_info("compact by uid ", who.peer.uid, ": backing ", before, " -> ", after, " bytes");
    return absl::OkStatus();
  });
}

grpc::Status AdminService::Drain(grpc::ServerContext* c, const v1::DrainRequest* req, v1::DrainResponse* resp) {
  return handle(state_, __func__, c, std::nullopt, [&](Caller& who) -> absl::Status {
    if (req->pid() < 0) return absl::InvalidArgumentError(absl::StrCat("pid ", req->pid()));
    if (who.peer.uid != 0) {
      for (const auto& s : state_->sessions->list()) {
        if ((req->pid() == 0 || s->peer.pid == req->pid()) && s->peer.uid != who.peer.uid) {
          return absl::PermissionDeniedError(absl::StrCat("pid ", s->peer.pid, " belongs to uid ", s->peer.uid,
                                                          "; only root drains other users' processes"));
        }
      }
    }
    uint32_t asked = state_->sessions->drain(req->pid(), req->region());
    if (asked == 0 && req->pid() != 0) {
      return absl::NotFoundError(absl::StrCat("no session of pid ", req->pid(),
                                              req->region().empty() ? "" : " with region " + quote_client_text(req->region()),
                                              " open"));
    }
    resp->set_sessions(asked);
    log_info("drain asked of ", asked, " session(s) by uid ", who.peer.uid);
    return absl::OkStatus();
  });
}

grpc::Status AdminService::ListClients(grpc::ServerContext* c, const v1::ListClientsRequest*,
                                       v1::ListClientsResponse* resp) {
  return handle(state_, __func__, c, std::nullopt, [&](Caller& who) -> absl::Status {
    for (const auto& s : state_->sessions->list()) {
      if (!sees_process(who.peer, s->peer.uid)) continue;
      v1::ClientInfo* ci = resp->add_clients();
      ci->set_session(s->id);
      ci->set_pid(s->peer.pid);
      ci->set_uid(s->peer.uid);
      ci->set_program(s->program);
      ci->set_connected_ms(s->connected_ms);
      ci->set_rpcs(s->rpcs.load());
      for (const auto& [h, a] : state_->sessions->attachments(*s)) {
        if (!sees_region(who.peer, a.region->record)) continue;
        v1::ClientLeaseInfo* li = ci->add_leases();
        li->set_region(a.region->record.name);
        li->set_lease_slot(a.slot);
        std::lock_guard<std::mutex> g(a.region->lock);
        if (!a.region->usable().ok() || a.slot == kNoLeaseSlot) continue;
        li->set_blocks(a.region->leases()->blocks_held(a.slot));
        li->set_leases(a.region->owner->lease_slot(a.slot).lease_calls);
      }
    }
    return absl::OkStatus();
  });
}

grpc::Status AdminService::Stats(grpc::ServerContext* c, const v1::StatsRequest*, v1::StatsResponse* resp) {
  return handle(state_, __func__, c, std::nullopt, [&](Caller& who) -> absl::Status {
    resp->set_daemon_id(state_->daemon_id);
    resp->set_version(kVersion);
    resp->set_uptime_ms(wall_ms() - state_->started_ms);
    // Counts of what the caller may see; the daemon-wide totals below name nobody.
    uint32_t regions = 0, sessions = 0;
    for (const auto& r : state_->regions->list()) regions += sees_region(who.peer, r->record) ? 1 : 0;
    for (const auto& s : state_->sessions->list()) sessions += sees_process(who.peer, s->peer.uid) ? 1 : 0;
    resp->set_regions(regions);
    resp->set_sessions(sessions);
    resp->set_sessions_total(state_->sessions->sessions_total());
    resp->set_rpcs(state_->rpcs.load());
    resp->set_rpc_errors(state_->rpc_errors.load());
    resp->set_clients_reclaimed(state_->sessions->clients_reclaimed());
    resp->set_socket(state_->config->socket_path);
    resp->set_data_dir(state_->config->data_dir);
    resp->set_metrics_address(state_->metrics_address);
    return absl::OkStatus();
  });
}

grpc::Status AdminService::Profile(grpc::ServerContext* c, const v1::ProfileRequest* req,
                                   v1::ProfileResponse* resp) {
  return handle(state_, __func__, c, std::nullopt, [&](Caller& who) -> absl::Status {
    if (req->region().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("name a region, or \"", kProcessHeapLabel, "\" for process heaps"));
    }
    if (req->region() != kProcessHeapLabel) {
      std::shared_ptr<ServedRegion> r = state_->regions->find(req->region());
      if (r == nullptr) return absl::NotFoundError(absl::StrCat("no region named ", quote_client_text(req->region())));
      if (absl::Status s = check_access(r->record, who.peer, false); !s.ok()) return s;
    } else if (who.peer.uid != 0 && req->pid() != 0 && req->pid() != who.peer.pid) {
      // Another process's heap: its owner or root only.
      bool mine = false;
      for (const auto& s : state_->sessions->list()) mine |= s->peer.pid == req->pid() && s->peer.uid == who.peer.uid;
      if (!mine) return absl::PermissionDeniedError(absl::StrCat("process ", req->pid(), " is not yours"));
    }
    auto live = [this](const std::string& region, uint64_t offset) {
      return region_object_live(state_, region, offset);
    };
    // Only samples of the caller's own processes (root: everyone's), in a
    // region as in the process heaps: return addresses would undo ASLR.
    ProfileInput in = state_->telemetry->profile_input(req->region(), req->pid(), visible_samples_of(who.peer), live);
    in.time_nanos = static_cast<int64_t>(wall_ms()) * 1000000;
    in.comment = req->pid() != 0 ? absl::StrCat("memd heap profile of ", req->region(), ", pid ", req->pid())
                                 : absl::StrCat("memd heap profile of ", req->region());
    uint64_t live_samples = 0;
    for (const ProfileSample& s : in.samples) live_samples += s.live ? 1 : 0;
    absl::StatusOr<std::string> bytes = build_heap_profile(in);
    if (!bytes.ok()) return bytes.status();
    resp->set_profile(std::move(*bytes));
    resp->set_samples(in.samples.size());
    resp->set_live_samples(live_samples);
    return absl::OkStatus();
  });
}

}  // namespace memd::daemon
