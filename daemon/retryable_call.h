// A lease call made safe to repeat (v1 "Retrying a lease call"): the
// journal's part of every call that changes what a client holds, and the
// finishing, at start, of a call a killed daemon left half done.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include <grpcpp/grpcpp.h>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "daemon/lease_journal.h"
#include "daemon/region_registry.h"

namespace memd::daemon {

// Requests one call may abandon.
inline constexpr int kMaxAbandoned = 64;

struct RetryableCall {
  uint32_t slot = 0;
  pid_t pid = 0;               // the caller: the journal's answers are its own
  uint64_t start_time = 0;
  uint64_t request = 0;        // 0: not to be remembered
  bool first_attempt = false;  // never sent before: an id older than the journal keeps is still new
  const uint64_t* abandon = nullptr;
  int abandon_count = 0;
  JournalOp op = JournalOp::kNone;
  const uint32_t* pages = nullptr;  // a release's blocks (kept in the intent)
  uint32_t page_count = 0;
  grpc::ServerContext* context = nullptr;  // asked whether the caller has gone
};

// REQUIRES: the region's lock, a usable region. Takes back the grants of the
// requests the caller abandons; answers a request already answered with
// `replay` (its journal entry); applies a new one with `apply`, which fills
// the entry's answer (and, granting, tells the journal what it granted as
// it goes). A grant made for a caller that has gone (cancelled, deadline
// passed) is taken back before the call returns CANCELLED.
absl::Status run_retryable(ServedRegion& region, const RetryableCall& call,
                           absl::FunctionRef<absl::Status(JournalEntry&)> apply,
                           absl::FunctionRef<absl::Status(const JournalEntry&)> replay);

// At start, before anyone is served, REQUIRES: the region's lock. A call a
// killed daemon was in the middle of is finished (a release: what it had not
// given back yet goes back, and the answer is kept for the client's retry)
// or undone (a grant: nobody received it; the retry is applied afresh).
void finish_interrupted_call(ServedRegion& region);

}  // namespace memd::daemon
