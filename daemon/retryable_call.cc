#include "daemon/retryable_call.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/log.h"
#include "heap/crash_point.h"

namespace memd::daemon {
namespace {

bool grants(JournalOp op) { return op == JournalOp::kLease || op == JournalOp::kLeaseRun; }

// Gives back what `grant` granted, which its client never received.
absl::Status undo_grant(region::LeaseService* leases, uint32_t slot, const JournalEntry& grant) {
  if (grant.count == 0) return absl::OkStatus();
  if (static_cast<JournalOp>(grant.op) == JournalOp::kLeaseRun) {
    return leases->take_back_run(slot, heap::PageIndex{grant.pages[0]});
  }
  std::vector<heap::PageIndex> pages = pages_of(grant);
  return leases->take_back(slot, pages.data(), static_cast<uint32_t>(pages.size()));
}

}  // namespace

absl::Status run_retryable(ServedRegion& region, const RetryableCall& call,
                           absl::FunctionRef<absl::Status(JournalEntry&)> apply,
                           absl::FunctionRef<absl::Status(const JournalEntry&)> replay) {
  LeaseJournal* journal = region.journal.get();
  region::LeaseService* leases = region.leases();
  if (call.abandon_count > kMaxAbandoned) {
    return absl::InvalidArgumentError(
        absl::StrCat(call.abandon_count, " requests abandoned in one call (at most ", kMaxAbandoned, ")"));
  }
  if (journal != nullptr) {
    journal->bind(call.slot, call.pid, call.start_time);
    for (int i = 0; i < call.abandon_count; ++i) {
      JournalEntry grant;
      if (!journal->forget_grant(call.slot, call.abandon[i], &grant)) continue;
      // Blocks since given back, or a run claimed since, are not the
      // client's to abandon any more: what is still the grant's goes back.
      if (absl::Status s = undo_grant(leases, call.slot, grant); !s.ok()) {
        log_warning("region \"", region.record.name, "\": request ", grant.request, " abandoned by pid ", call.pid,
                    " is not taken back: ", s.message());
      }
    }
    if (call.request != 0) {
      JournalEntry answer;
      switch (journal->look_up(call.slot, call.request, &answer)) {
        case LeaseJournal::Seen::kAnswered:
          region.replayed_requests.fetch_add(1, std::memory_order_relaxed);
          return replay(answer);
        case LeaseJournal::Seen::kTooOld:
          // Never sent before, so never applied: a thread whose call took
          // longer to arrive than 64 of its process's later ones.
          if (call.first_attempt) break;
          return absl::AbortedError(absl::StrCat("request ", call.request, " is older than the last ",
                                                 LeaseJournal::kDepth,
                                                 " answers the daemon keeps for this lease: its outcome is unknown"));
        case LeaseJournal::Seen::kNew:
          break;
      }
    }
  }
  if (call.context != nullptr && call.context->IsCancelled()) {
    return absl::CancelledError("the caller has gone (cancelled, or its deadline passed)");
  }
  if (journal != nullptr) journal->begin(call.slot, call.request, call.op, call.pages, call.page_count);
  JournalEntry entry{};
  entry.request = call.request;
  entry.op = static_cast<uint8_t>(call.op);
  absl::Status result = apply(entry);
  heap::crash_point("lease.answer");  // applied, not yet kept in the journal
  if (result.ok() && grants(call.op) && call.context != nullptr && call.context->IsCancelled()) {
    // Nobody will receive this answer: what it granted goes back now.
    absl::Status undone = undo_grant(leases, call.slot, entry);
    if (journal != nullptr) journal->abandon_intent();
    if (!undone.ok()) return undone;
    region.grants_taken_back.fetch_add(1, std::memory_order_relaxed);
    return absl::CancelledError("the caller has gone (cancelled, or its deadline passed): the grant is taken back");
  }
  entry.code = static_cast<int32_t>(result.code());
  if (journal != nullptr) journal->finish(call.slot, entry);
  return result;
}

void finish_interrupted_call(ServedRegion& region) {
  LeaseJournal* journal = region.journal.get();
  if (journal == nullptr || region.owner == nullptr) return;
  const JournalIntent* in = journal->leftover();
  if (in == nullptr) return;
  region::LeaseService* leases = region.leases();
  JournalOp op = static_cast<JournalOp>(in->op);
  uint64_t request = in->request == ~uint64_t{0} ? 0 : in->request;
  JournalEntry answered;
  if (request != 0 && journal->look_up(in->slot, request, &answered) == LeaseJournal::Seen::kAnswered) {
    journal->abandon_intent();  // the answer was kept: it stands
    return;
  }
  std::vector<heap::PageIndex> pages;
  for (uint32_t i = 0; i < in->count && i < region::kMaxReleaseBatch; ++i) pages.push_back(heap::PageIndex{in->pages[i]});
  JournalEntry entry{};
  entry.request = request;
  entry.op = in->op;
  const char* what = "left as it is";
  switch (op) {
    case JournalOp::kLease:
      for (heap::PageIndex p : pages) (void)leases->take_back(in->slot, &p, 1);
      what = "undone (its grant taken back)";
      entry.request = 0;  // the retry is applied afresh
      break;
    case JournalOp::kLeaseRun:
      if (!pages.empty()) (void)leases->take_back_run(in->slot, pages[0]);
      what = "undone (its run taken back)";
      entry.request = 0;
      break;
    case JournalOp::kRelease:
      leases->give_back_held(in->slot, pages.data(), static_cast<uint32_t>(pages.size()));
      entry.code = static_cast<int32_t>(absl::StatusCode::kOk);
      what = "finished (the blocks it had not given back yet went back)";
      break;
    case JournalOp::kReleaseRun:
      if (!pages.empty()) entry.code = static_cast<int32_t>(leases->release_huge(in->slot, pages[0]).code());
      what = "finished";
      break;
    default:
      entry.request = 0;  // a resize: repeating it is harmless
      break;
  }
  log_warning("region \"", region.record.name, "\": a lease call of lease slot ", in->slot,
              " was under way when the previous daemon stopped; it is ", what);
  journal->finish(in->slot, entry);
}

}  // namespace memd::daemon
