// Regions: open (or create) a region and attach the caller's session to it,
// close, list, stat, remove.
#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "proto/wire_enums.h"
#include "daemon/client_text.h"
#include "daemon/handler.h"
#include "daemon/log.h"
#include "disciplines/shared_source.h"

namespace memd::daemon {
namespace {

// The longest region name the daemon takes: a file region's path and its
// catalog entry add a suffix to it, and a shm object the namespace and
// "memd.", all within NAME_MAX (255).
constexpr size_t kMaxRegionName = 200;

absl::Status check_name_length(std::string_view name) {
  if (name.size() <= kMaxRegionName) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("region name ", quote_client_text(name), " is longer than ", kMaxRegionName,
                                                 " characters"));
}

// Regions one user owns, counted before it creates one more (root is
// exempt). REQUIRES: no other creation runs (create_lock below), so that
// two at once cannot both pass.
absl::Status check_region_quota(DaemonState& state, const OpenArgs& a, const Peer& who) {
  if (!a.create || who.uid == 0 || state.regions->find(a.name) != nullptr) return absl::OkStatus();
  uint32_t owned = 0;
  for (const auto& r : state.regions->list()) owned += r->record.owner_uid == who.uid;
  if (owned < state.config->max_regions_per_uid) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat("uid ", who.uid, " owns ", owned,
                                                   " regions, the limit (max-regions-per-uid)"));
}

std::mutex create_lock;  // see check_region_quota

}  // namespace

grpc::Status RegionService::Open(grpc::ServerContext* c, const v1::OpenRegionRequest* req,
                                 v1::OpenRegionResponse* resp) {
  return handle(state_, __func__, c, req->session(), [&](Caller& who) -> absl::Status {
    OpenArgs a;
    a.name = req->name();
    std::optional<Discipline> discipline = discipline_from_number(static_cast<uint32_t>(req->discipline()));
    if (!discipline) return absl::InvalidArgumentError(absl::StrCat("unknown discipline ", req->discipline()));
    std::optional<Method> method = method_from_number(static_cast<uint32_t>(req->method()));
    if (!method) return absl::InvalidArgumentError(absl::StrCat("unknown method ", req->method()));
    a.discipline = *discipline;
    a.method = *method;
    a.create = req->create();
    a.exclusive = req->exclusive();
    a.max_bytes = req->max_bytes();
    a.max_clients = req->max_clients();
    a.max_threads = req->max_threads();
    a.mode = req->mode();
    a.read_only = req->read_only();
    if (absl::Status s = check_name_length(a.name); !s.ok()) return s;
    bool created = false;
    absl::StatusOr<std::shared_ptr<ServedRegion>> r;
    {
      std::unique_lock<std::mutex> creating(create_lock, std::defer_lock);
      if (a.create) creating.lock();
      if (absl::Status s = check_region_quota(*state_, a, who.peer); !s.ok()) return s;
      r = state_->regions->open(a, who.peer, &created);
    }
    if (!r.ok()) return r.status();
    absl::StatusOr<Attachment> at = state_->sessions->attach(*who.session, *r, a.read_only);
    if (!at.ok()) return at.status();
    const CatalogRecord& rec = (*r)->record;
    resp->set_handle((*r)->handle);
    resp->set_object_path(rec.object);
    resp->set_discipline(to_wire(rec.discipline));
    resp->set_method(to_wire(rec.method));
    resp->set_created(created);
    {
      std::lock_guard<std::mutex> g((*r)->lock);
      if (absl::Status s = (*r)->usable(); !s.ok()) return s;
      resp->set_generation((*r)->owner->generation());
      if (at->slot != kNoLeaseSlot) {
        resp->set_lease_slot(at->slot);
        resp->set_holder(at->slot + 1);
        resp->set_stash_owner((*r)->owner->lease_slot(at->slot).stash_owner);
      }
    }
    log_info("session ", who.session->id, " (pid ", who.peer.pid, ") ", created ? "created" : "opened", " region \"",
             rec.name, "\"", a.read_only ? " read-only" : "", at->slot != kNoLeaseSlot ? absl::StrCat(", lease ", at->slot) : "");
    return absl::OkStatus();
  });
}

grpc::Status RegionService::Close(grpc::ServerContext* c, const v1::CloseRegionRequest* req,
                                  v1::CloseRegionResponse*) {
  return handle(state_, __func__, c, req->session(), [&](Caller& who) {
    return state_->sessions->detach(*who.session, req->handle());
  });
}

grpc::Status RegionService::List(grpc::ServerContext* c, const v1::ListRegionsRequest*, v1::ListRegionsResponse* resp) {
  return handle(state_, __func__, c, std::nullopt, [&](Caller& who) {
    for (const auto& r : state_->regions->list()) {
      // Regions the caller may not read are not listed to it.
      if (!check_access(r->record, who.peer, false).ok()) continue;
      describe_region(*r, resp->add_regions());
    }
    return absl::OkStatus();
  });
}

grpc::Status RegionService::Stat(grpc::ServerContext* c, const v1::StatRegionRequest* req, v1::RegionInfo* resp) {
  return handle(state_, __func__, c, std::nullopt, [&](Caller& who) -> absl::Status {
    std::shared_ptr<ServedRegion> r = state_->regions->find(req->name());
    if (r == nullptr) return absl::NotFoundError(absl::StrCat("no region named ", quote_client_text(req->name())));
    if (absl::Status s = check_access(r->record, who.peer, false); !s.ok()) return s;
    describe_region(*r, resp);
    return absl::OkStatus();
  });
}

grpc::Status RegionService::Remove(grpc::ServerContext* c, const v1::RemoveRegionRequest* req,
                                   v1::RemoveRegionResponse*) {
  std::optional<uint64_t> session;
  if (req->session() != 0) session = req->session();
  return handle(state_, __func__, c, session, [&](Caller& who) {
    // No region has a longer name; the registry would quote it whole.
    if (req->name().size() > kMaxRegionName) {
      return absl::NotFoundError(absl::StrCat("no region named ", quote_client_text(req->name())));
    }
    absl::Status s = state_->regions->remove(req->name(), who.peer);
    if (s.ok()) state_->telemetry->forget_region(req->name());
    return s;
  });
}

void describe_region(ServedRegion& r, v1::RegionInfo* out) {
  const CatalogRecord& rec = r.record;
  out->set_name(rec.name);
  out->set_discipline(to_wire(rec.discipline));
  out->set_method(to_wire(rec.method));
  out->set_object_path(rec.object);
  out->set_owner_uid(rec.owner_uid);
  out->set_owner_gid(rec.owner_gid);
  out->set_mode(rec.mode);
  out->set_max_bytes(rec.max_bytes);
  out->set_clients(r.attached.load());
  out->set_lease_rpcs(r.lease_rpcs.load());
  std::lock_guard<std::mutex> g(r.lock);
  if (!r.usable().ok()) {
    out->set_damage(r.damage);
    return;
  }
  heap::RegionStats st = r.owner->stat();
  if (!r.usable().ok()) {
    out->set_damage(r.damage);
    return;
  }
  Region::HeaderFacts h = r.owner->header_facts();
  uint64_t leased = 0;
  for (uint32_t i = 0; i < h.max_clients; ++i) leased += r.leases()->blocks_held(i);
  struct stat sb {};
  if (stat(object_os_path(rec).c_str(), &sb) == 0) {
    out->set_backing_bytes(uint64_t(sb.st_blocks) * 512);
    out->set_object_length(static_cast<uint64_t>(sb.st_size));
  }
  out->set_pages_total(h.max_pages);
  out->set_pages_in_use(st.pages_in_use);
  out->set_pages_free(st.pages_dirty + st.pages_discarded);
  out->set_pages_discarded(st.pages_discarded);
  out->set_blocks_leased(leased);
  out->set_blocks_abandoned(r.owner->abandoned_blocks());
  out->set_objects(st.busy_objects);
  out->set_object_bytes(st.busy_bytes);
  out->set_generation(h.generation);
  out->set_recoveries(h.recoveries);
  out->set_leaked_objects(h.leaked_objects);
}

}  // namespace memd::daemon
