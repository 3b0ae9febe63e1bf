// Leases: blocks and page runs for a session's process, through the
// region's LeaseService (which checks every request against the lease table
// and the page descriptors) under the region's lock.
#include "absl/strings/str_cat.h"
#include "daemon/handler.h"

namespace memd::daemon {
namespace {

// The region and lease slot a call names, for a session allowed to lease.
struct Target {
  std::shared_ptr<ServedRegion> region;
  uint32_t slot = 0;
};

absl::StatusOr<Target> target(DaemonState* state, const Caller& who, uint32_t handle) {
  absl::StatusOr<Attachment> a = state->sessions->attachment(*who.session, handle);
  if (!a.ok()) return a.status();
  if (a->slot == kNoLeaseSlot) {
    return absl::PermissionDeniedError(absl::StrCat("region \"", a->region->record.name, "\" is open read-only"));
  }
  a->region->lease_rpcs.fetch_add(1, std::memory_order_relaxed);
  return Target{a->region, a->slot};
}

// Runs `op` on the target's region under its lock. The region is asked
// whether it is still usable before and again after: a fault contained while
// `op` touched its memory means `op` read zeros where data was, so its
// answer is not given.
template <class F>
absl::Status locked(const Target& t, F op) {
  std::lock_guard<std::mutex> g(t.region->lock);
  if (absl::Status s = t.region->usable(); !s.ok()) return s;
  absl::Status result = op();
  if (absl::Status s = t.region->usable(); !s.ok()) return s;
  return result;
}

}  // namespace

grpc::Status LeaseRpcService::Lease(grpc::ServerContext* c, const v1::LeaseRequest* req, v1::LeaseResponse* resp) {
  return handle(state_, __func__, c, req->session(), [&](Caller& who) -> absl::Status {
    absl::StatusOr<Target> t = target(state_, who, req->region());
    if (!t.ok()) return t.status();
    heap::PageKind kind;
    switch (req->kind()) {
      case v1::BLOCK_SEGREGATED: kind = heap::PageKind::kSegregated; break;
      case v1::BLOCK_LARGE: kind = heap::PageKind::kLarge; break;
      default: return absl::InvalidArgumentError(absl::StrCat("block kind ", req->kind(), " cannot be leased"));
    }
    if (req->size_class() > UINT16_MAX) return absl::InvalidArgumentError(absl::StrCat("no size class ", req->size_class()));
    uint32_t count = req->count();
    return locked(*t, [&]() -> absl::Status {
      if (uint64_t quota = state_->config->client_block_quota; quota != 0 && count != 0) {
        uint64_t held = t->region->leases()->blocks_held(t->slot);
        if (held >= quota) {
          return absl::ResourceExhaustedError(absl::StrCat("pid ", who.peer.pid, " holds ", held, " blocks of region \"",
                                                           t->region->record.name, "\", its quota (client-block-quota)"));
        }
        count = static_cast<uint32_t>(std::min<uint64_t>(count, quota - held));
      }
      heap::AcquiredBlock blocks[client::kMaxLeaseBatch];
      absl::StatusOr<uint32_t> n = t->region->leases()->lease(t->slot, kind, static_cast<uint16_t>(req->size_class()),
                                                              req->owner(), count, blocks);
      if (!n.ok()) return n.status();
      for (uint32_t i = 0; i < *n; ++i) {
        v1::LeasedBlock* b = resp->add_blocks();
        b->set_page(blocks[i].first.value);
        b->set_adopted(blocks[i].adopted);
        b->set_zeroed(blocks[i].zeroed);
      }
      return absl::OkStatus();
    });
  });
}

grpc::Status LeaseRpcService::Release(grpc::ServerContext* c, const v1::ReleaseRequest* req, v1::ReleaseResponse*) {
  return handle(state_, __func__, c, req->session(), [&](Caller& who) -> absl::Status {
    absl::StatusOr<Target> t = target(state_, who, req->region());
    if (!t.ok()) return t.status();
    std::vector<heap::PageIndex> pages;
    pages.reserve(req->pages_size());
    for (uint32_t p : req->pages()) pages.push_back(heap::PageIndex{p});
    return locked(*t, [&] {
      return t->region->leases()->give_back(t->slot, pages.data(), static_cast<uint32_t>(pages.size()));
    });
  });
}

grpc::Status LeaseRpcService::LeaseRun(grpc::ServerContext* c, const v1::LeaseRunRequest* req,
                                       v1::LeaseRunResponse* resp) {
  return handle(state_, __func__, c, req->session(), [&](Caller& who) -> absl::Status {
    absl::StatusOr<Target> t = target(state_, who, req->region());
    if (!t.ok()) return t.status();
    uint32_t align = req->align_pages() == 0 ? 1 : req->align_pages();
    return locked(*t, [&]() -> absl::Status {
      absl::StatusOr<heap::AcquiredBlock> b =
          t->region->leases()->acquire_huge(t->slot, heap::PageCount{req->pages()}, heap::PageCount{align});
      if (!b.ok()) return b.status();
      resp->mutable_run()->set_page(b->first.value);
      resp->mutable_run()->set_zeroed(b->zeroed);
      return absl::OkStatus();
    });
  });
}

grpc::Status LeaseRpcService::ReleaseRun(grpc::ServerContext* c, const v1::ReleaseRunRequest* req,
                                         v1::ReleaseRunResponse*) {
  return handle(state_, __func__, c, req->session(), [&](Caller& who) -> absl::Status {
    absl::StatusOr<Target> t = target(state_, who, req->region());
    if (!t.ok()) return t.status();
    return locked(*t, [&] { return t->region->leases()->release_huge(t->slot, heap::PageIndex{req->page()}); });
  });
}

grpc::Status LeaseRpcService::ResizeRun(grpc::ServerContext* c, const v1::ResizeRunRequest* req,
                                        v1::ResizeRunResponse* resp) {
  return handle(state_, __func__, c, req->session(), [&](Caller& who) -> absl::Status {
    absl::StatusOr<Target> t = target(state_, who, req->region());
    if (!t.ok()) return t.status();
    return locked(*t, [&]() -> absl::Status {
      bool zeroed = false;
      absl::StatusOr<bool> ok = t->region->leases()->resize_huge(t->slot, heap::PageIndex{req->page()},
                                                                 heap::PageCount{req->pages()}, &zeroed);
      if (!ok.ok()) return ok.status();
      resp->set_resized(*ok);
      resp->set_zeroed(zeroed);
      return absl::OkStatus();
    });
  });
}

}  // namespace memd::daemon
