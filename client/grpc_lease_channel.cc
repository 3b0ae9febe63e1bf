#include "client/grpc_lease_channel.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace memd::client {
namespace {

// Worth waiting for the next session and trying again: the daemon is away
// (UNAVAILABLE), or a restarted daemon does not know our old session yet
// (UNAUTHENTICATED).
bool retry_after_reconnect(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE || s.error_code() == grpc::StatusCode::UNAUTHENTICATED;
}

// The answer did not come: the call may or may not have been applied.
bool answer_lost(const grpc::Status& s) {
  return retry_after_reconnect(s) || s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
         s.error_code() == grpc::StatusCode::CANCELLED;
}

constexpr int kAttempts = 4;
// Grants given up on that are remembered for the next call; the daemon
// takes at most this many per call (daemon/retryable_call.h).
constexpr size_t kMaxAbandoned = 64;

}  // namespace

GrpcLeaseChannel::GrpcLeaseChannel(std::shared_ptr<DaemonConnection> connection, std::string region,
                                   const region::ClientLease& lease, uint32_t handle)
    : connection_(std::move(connection)), lease_(lease) {
  link_.name = std::move(region);
  link_.slot = lease.slot;
  link_.handle.store(handle);
  connection_->add(&link_);
}

GrpcLeaseChannel::~GrpcLeaseChannel() {
  // The region's counts since the last report go out while it is still linked.
  connection_->flush_telemetry(DaemonConnection::kLastReportWait);
  connection_->remove(&link_);
  (void)invoke(Change::kNone, [&](grpc::ClientContext& ctx, const DaemonConnection::Current& cur, uint32_t handle,
                                  const Retry&) {
    v1::CloseRegionRequest req;
    req.set_session(cur.session);
    req.set_handle(handle);
    v1::CloseRegionResponse resp;
    return cur.regions->Close(&ctx, req, &resp);
  });
}

template <class Call>
absl::Status GrpcLeaseChannel::invoke(Change change, Call call) {
  RpcGuard guard;
  Retry retry;
  if (change != Change::kNone) {
    retry.request = next_request_.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> g(abandoned_mu_);
    retry.abandon = abandoned_;
  }
  grpc::Status last;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    absl::StatusOr<DaemonConnection::Current> cur = connection_->current();
    if (!cur.ok()) return cur.status();
    uint32_t handle = link_.handle.load();
    if (handle == 0) {
      return absl::FailedPreconditionError(absl::StrCat("the lease in region \"", link_.name,
                                                        "\" was not resumed after the daemon restarted"));
    }
    grpc::ClientContext ctx;
    connection_->set_deadline(&ctx);
    retry.first_attempt = attempt == 0;
    last = call(ctx, *cur, handle, retry);
    connection_->lease_calls.fetch_add(1, std::memory_order_relaxed);
    if (!answer_lost(last)) break;
    // Repeated with the same id: the daemon answers it as it answered the
    // first attempt, if that one reached it.
    if (retry_after_reconnect(last)) connection_->await_reconnect(cur->epoch);
  }
  if (change != Change::kNone) {
    std::lock_guard<std::mutex> g(abandoned_mu_);
    if (last.ok()) {
      // The daemon has taken those grants back.
      std::erase_if(abandoned_, [&](uint64_t id) {
        return std::find(retry.abandon.begin(), retry.abandon.end(), id) != retry.abandon.end();
      });
    } else if (change == Change::kGrant && answer_lost(last)) {
      // Whatever it was granted, nobody here has it: the next call gives it
      // back. Past the bound the oldest stays with this process until it
      // closes the region.
      if (abandoned_.size() == kMaxAbandoned) abandoned_.erase(abandoned_.begin());
      abandoned_.push_back(retry.request);
    }
  }
  return from_grpc(last);
}

absl::StatusOr<region::ClientLease> GrpcLeaseChannel::hello(pid_t, uint64_t) { return lease_; }

absl::StatusOr<uint32_t> GrpcLeaseChannel::lease(heap::PageKind kind, uint16_t cls, heap::OwnerId owner,
                                                 uint32_t count, heap::AcquiredBlock* out) {
  v1::LeaseResponse resp;
  absl::Status s = invoke(Change::kGrant, [&](grpc::ClientContext& ctx, const DaemonConnection::Current& cur, uint32_t handle,
                                        const Retry& retry) {
    v1::LeaseRequest req;
    req.set_session(cur.session);
    req.set_region(handle);
    retry.fill(&req);
    req.set_kind(kind == heap::PageKind::kLarge ? v1::BLOCK_LARGE : v1::BLOCK_SEGREGATED);
    req.set_size_class(cls);
    req.set_owner(owner);
    req.set_count(count);
    resp.Clear();
    return cur.leases->Lease(&ctx, req, &resp);
  });
  if (!s.ok()) return s;
  uint32_t n = std::min<uint32_t>(count, static_cast<uint32_t>(resp.blocks_size()));
  for (uint32_t i = 0; i < n; ++i) {
    const v1::LeasedBlock& b = resp.blocks(static_cast<int>(i));
    out[i].first = heap::PageIndex{b.page()};
    out[i].adopted = b.adopted();
    out[i].zeroed = b.zeroed();
  }
  return n;
}

absl::Status GrpcLeaseChannel::give_back(const heap::PageIndex* blocks, uint32_t n) {
  return invoke(Change::kRelease, [&](grpc::ClientContext& ctx, const DaemonConnection::Current& cur, uint32_t handle,
                                        const Retry& retry) {
    v1::ReleaseRequest req;
    req.set_session(cur.session);
    req.set_region(handle);
    retry.fill(&req);
    for (uint32_t i = 0; i < n; ++i) req.add_pages(blocks[i].value);
    v1::ReleaseResponse resp;
    return cur.leases->Release(&ctx, req, &resp);
  });
}

absl::StatusOr<heap::AcquiredBlock> GrpcLeaseChannel::acquire_huge(heap::PageCount pages, heap::PageCount align) {
  v1::LeaseRunResponse resp;
  absl::Status s = invoke(Change::kGrant, [&](grpc::ClientContext& ctx, const DaemonConnection::Current& cur, uint32_t handle,
                                        const Retry& retry) {
    v1::LeaseRunRequest req;
    req.set_session(cur.session);
    req.set_region(handle);
    retry.fill(&req);
    req.set_pages(pages.value);
    req.set_align_pages(align.value);
    return cur.leases->LeaseRun(&ctx, req, &resp);
  });
  if (!s.ok()) return s;
  heap::AcquiredBlock b;
  b.first = heap::PageIndex{resp.run().page()};
  b.zeroed = resp.run().zeroed();
  return b;
}

absl::Status GrpcLeaseChannel::release_huge(heap::PageIndex first) {
  return invoke(Change::kRelease, [&](grpc::ClientContext& ctx, const DaemonConnection::Current& cur, uint32_t handle,
                                        const Retry& retry) {
    v1::ReleaseRunRequest req;
    req.set_session(cur.session);
    req.set_region(handle);
    retry.fill(&req);
    req.set_page(first.value);
    v1::ReleaseRunResponse resp;
    return cur.leases->ReleaseRun(&ctx, req, &resp);
  });
}

absl::StatusOr<bool> GrpcLeaseChannel::resize_huge(heap::PageIndex first, heap::PageCount want, bool* zeroed) {
  v1::ResizeRunResponse resp;
  absl::Status s = invoke(Change::kRelease, [&](grpc::ClientContext& ctx, const DaemonConnection::Current& cur, uint32_t handle,
                                        const Retry& retry) {
    v1::ResizeRunRequest req;
    req.set_session(cur.session);
    req.set_region(handle);
    retry.fill(&req);
    req.set_page(first.value);
    req.set_pages(want.value);
    return cur.leases->ResizeRun(&ctx, req, &resp);
  });
  if (!s.ok()) return s;
  *zeroed = resp.zeroed();
  return resp.resized();
}

}  // namespace memd::client
