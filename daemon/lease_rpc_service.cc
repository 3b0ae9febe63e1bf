// Leases: blocks and page runs for a session's process, through the
// region's LeaseService (which checks every request against the lease table
// and the page descriptors) under the region's lock. Each call that changes
// what the client holds goes through run_retryable: a repeated request gets
// its first answer, and a grant to a caller that has gone is taken back.
#include "absl/strings/str_cat.h"
#include "daemon/handler.h"
#include "daemon/retryable_call.h"

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

// The journal's view of a call: who makes it, its id, what it abandons.
template <class Request>
RetryableCall retryable(const Target& t, const Caller& who, grpc::ServerContext* c, const Request& req,
                        JournalOp op) {
  RetryableCall call;
  call.slot = t.slot;
  call.pid = who.peer.pid;
  call.start_time = who.session->start_time;
  call.request = req.request();
  call.first_attempt = req.first_attempt();
  call.abandon = req.abandon().data();
  call.abandon_count = req.abandon_size();
  call.op = op;
  call.context = c;
  return call;
}

absl::Status replayed_status(const JournalEntry& e) {
  auto code = static_cast<absl::StatusCode>(e.code);
  if (code == absl::StatusCode::kOk) return absl::OkStatus();
  if (e.abandoned != 0) {
    return absl::AbortedError(absl::StrCat("request ", e.request, " was abandoned by its caller: it grants nothing"));
  }
  return absl::Status(code, absl::StrCat("request ", e.request, " was answered before: ", absl::StatusCodeToString(code)));
}

// Growths of the region's object its owner's bytes refused so far.
uint64_t growth_refusals(const ServedRegion& r) {
  return r.bytes_account != nullptr ? r.bytes_account->refusals.load() : 0;
}

// A lease that failed because the region could not grow past its owner's
// bytes says so: the page heap itself only knows it is out of memory.
absl::Status explain_refusal(const ServedRegion& r, uint64_t refusals_before, absl::Status failed) {
  const UidBytes::Account* a = r.bytes_account;
  if (a == nullptr || a->refusals.load() == refusals_before) return failed;
  return absl::ResourceExhaustedError(absl::StrCat("region \"", r.record.name, "\" cannot grow: its owner (uid ", a->uid,
                                                   ") has ", a->used.load(), " bytes of regions, its limit (max-bytes-per-uid ",
                                                   a->limit, ")"));
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
    return locked(*t, [&]() -> absl::Status {
      auto answer = [&](const JournalEntry& e) {
        for (uint32_t i = 0; i < e.count; ++i) {
          v1::LeasedBlock* b = resp->add_blocks();
          b->set_page(e.pages[i]);
          b->set_adopted(e.adopted >> i & 1);
          b->set_zeroed(e.zeroed >> i & 1);
        }
      };
      auto apply = [&](JournalEntry& e) -> absl::Status {
        uint32_t count = req->count();
        if (uint64_t quota = state_->config->client_block_quota; quota != 0 && count != 0) {
          uint64_t held = t->region->leases()->blocks_held(t->slot);
          if (held >= quota) {
            return absl::ResourceExhaustedError(absl::StrCat("pid ", who.peer.pid, " holds ", held,
                                                             " blocks of region \"", t->region->record.name,
                                                             "\", its quota (client-block-quota)"));
          }
          count = static_cast<uint32_t>(std::min<uint64_t>(count, quota - held));
        }
        heap::AcquiredBlock blocks[region::kMaxLeaseBatch];
        const uint64_t refusals = growth_refusals(*t->region);
        absl::StatusOr<uint32_t> n = t->region->leases()->lease(
            t->slot, kind, static_cast<uint16_t>(req->size_class()), req->owner(), count, blocks);
        if (!n.ok()) return explain_refusal(*t->region, refusals, n.status());
        e.count = *n;
        for (uint32_t i = 0; i < *n; ++i) {
          e.pages[i] = blocks[i].first.value;
          e.adopted |= uint32_t{blocks[i].adopted} << i;
          e.zeroed |= uint32_t{blocks[i].zeroed} << i;
        }
        if (t->region->journal) t->region->journal->granted(e.pages, e.count);
        answer(e);
        return absl::OkStatus();
      };
      auto replay = [&](const JournalEntry& e) -> absl::Status {
        if (e.code != 0) return replayed_status(e);
        std::vector<heap::PageIndex> pages = pages_of(e);
        if (pages.empty() || !t->region->leases()->holds(t->slot, pages.data(), static_cast<uint32_t>(pages.size()))) {
          return absl::FailedPreconditionError(
              absl::StrCat("request ", e.request, " was granted blocks that are no longer the caller's"));
        }
        answer(e);
        return absl::OkStatus();
      };
      return run_retryable(*t->region, retryable(*t, who, c, *req, JournalOp::kLease), apply, replay);
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
      RetryableCall call = retryable(*t, who, c, *req, JournalOp::kRelease);
      call.pages = req->pages().data();
      call.page_count = static_cast<uint32_t>(req->pages_size());
      return run_retryable(
          *t->region, call,
          [&](JournalEntry&) {
            return t->region->leases()->give_back(t->slot, pages.data(), static_cast<uint32_t>(pages.size()));
          },
          replayed_status);
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
      auto apply = [&](JournalEntry& e) -> absl::Status {
        const uint64_t refusals = growth_refusals(*t->region);
        absl::StatusOr<heap::AcquiredBlock> b =
            t->region->leases()->acquire_huge(t->slot, heap::PageCount{req->pages()}, heap::PageCount{align});
        if (!b.ok()) return explain_refusal(*t->region, refusals, b.status());
        e.count = 1;
        e.pages[0] = b->first.value;
        e.zeroed = b->zeroed ? 1 : 0;
        if (t->region->journal) t->region->journal->granted(e.pages, 1);
        resp->mutable_run()->set_page(b->first.value);
        resp->mutable_run()->set_zeroed(b->zeroed);
        return absl::OkStatus();
      };
      auto replay = [&](const JournalEntry& e) -> absl::Status {
        if (e.code != 0) return replayed_status(e);
        if (e.count == 0 || !t->region->leases()->has_run(heap::PageIndex{e.pages[0]})) {
          return absl::FailedPreconditionError(
              absl::StrCat("request ", e.request, " was granted a run that has been freed since"));
        }
        resp->mutable_run()->set_page(e.pages[0]);
        resp->mutable_run()->set_zeroed(e.zeroed & 1);
        return absl::OkStatus();
      };
      return run_retryable(*t->region, retryable(*t, who, c, *req, JournalOp::kLeaseRun), apply, replay);
    });
  });
}

grpc::Status LeaseRpcService::ReleaseRun(grpc::ServerContext* c, const v1::ReleaseRunRequest* req,
                                         v1::ReleaseRunResponse*) {
  return handle(state_, __func__, c, req->session(), [&](Caller& who) -> absl::Status {
    absl::StatusOr<Target> t = target(state_, who, req->region());
    if (!t.ok()) return t.status();
    return locked(*t, [&] {
      uint32_t page = req->page();
      RetryableCall call = retryable(*t, who, c, *req, JournalOp::kReleaseRun);
      call.pages = &page;
      call.page_count = 1;
      return run_retryable(
          *t->region, call,
          [&](JournalEntry&) { return t->region->leases()->release_huge(t->slot, heap::PageIndex{page}); },
          replayed_status);
    });
  });
}

grpc::Status LeaseRpcService::ResizeRun(grpc::ServerContext* c, const v1::ResizeRunRequest* req,
                                        v1::ResizeRunResponse* resp) {
  return handle(state_, __func__, c, req->session(), [&](Caller& who) -> absl::Status {
    absl::StatusOr<Target> t = target(state_, who, req->region());
    if (!t.ok()) return t.status();
    return locked(*t, [&]() -> absl::Status {
      auto apply = [&](JournalEntry& e) -> absl::Status {
        bool zeroed = false;
        absl::StatusOr<bool> ok = t->region->leases()->resize_huge(t->slot, heap::PageIndex{req->page()},
                                                                   heap::PageCount{req->pages()}, &zeroed);
        if (!ok.ok()) return ok.status();
        e.resized = *ok;
        e.zeroed = zeroed;
        resp->set_resized(*ok);
        resp->set_zeroed(zeroed);
        return absl::OkStatus();
      };
      auto replay = [&](const JournalEntry& e) -> absl::Status {
        if (e.code != 0) return replayed_status(e);
        resp->set_resized(e.resized != 0);
        resp->set_zeroed(e.zeroed & 1);
        return absl::OkStatus();
      };
      return run_retryable(*t->region, retryable(*t, who, c, *req, JournalOp::kResizeRun), apply, replay);
    });
  });
}

}  // namespace memd::daemon
