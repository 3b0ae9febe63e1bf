// What the daemon answered to each lease's recent requests, so that a
// retried call gets its first answer instead of being applied twice.
//
// A client retries a lease call when it did not hear the answer: the
// connection broke, the daemon was killed and restarted, the deadline
// passed. The call may have been applied. Applied again, a release could
// free a block the same client has been leased anew meanwhile (now in use),
// and a lease would grant blocks nobody receives. So every mutating call
// carries an id (v1 "Retrying a lease call"), and the journal keeps, per
// lease slot, the answers to the last kDepth ids.
//
// It lives in a file of the daemon's data directory, mapped shared: it is
// the daemon's own memory (clients cannot write it, unlike the region), and
// a daemon killed at any instant leaves it as it was, for the next daemon.
// One call at a time changes a region (the region's lock), so one intent
// record per region says which call was under way: a daemon that dies inside
// a call leaves it there, and the next daemon finishes or undoes that call
// before it serves anyone (see recover_intent in lease_rpc_service.cc).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "region/lease_service.h"

namespace memd::daemon {

enum class JournalOp : uint8_t { kNone = 0, kLease, kRelease, kLeaseRun, kReleaseRun, kResizeRun };

// One answered request.
struct JournalEntry {
  uint64_t request;   // 0: empty
  uint8_t op;         // JournalOp
  uint8_t resized;    // ResizeRun's answer
  uint8_t abandoned;  // 1: its caller gave it up (it grants nothing when repeated)
  uint8_t pad;
  int32_t code;       // absl::StatusCode of the answer
  uint32_t count;     // pages below (Lease: the blocks; LeaseRun: the run)
  uint32_t zeroed;    // bit i: pages[i] reads as zeros
  uint32_t adopted;   // bit i: pages[i] was adopted
  uint32_t pad2;
  uint32_t pages[region::kMaxLeaseBatch];
};
static_assert(sizeof(JournalEntry) == 160);

// The pages an entry names, as the lease service takes them.
inline std::vector<heap::PageIndex> pages_of(const JournalEntry& e) {
  std::vector<heap::PageIndex> out;
  for (uint32_t i = 0; i < e.count && i < region::kMaxLeaseBatch; ++i) out.push_back(heap::PageIndex{e.pages[i]});
  return out;
}

// The call under way in a region (at most one: the region's lock).
struct JournalIntent {
  uint64_t request;   // 0: none
  uint32_t slot;
  uint8_t op;         // JournalOp
  uint8_t pad[3];
  uint32_t count;     // pages below: a release's blocks, a lease's grant so far
  uint32_t pad2;
  uint32_t pages[region::kMaxReleaseBatch];
};

class LeaseJournal {
 public:
  static constexpr uint32_t kDepth = 64;  // answers kept per lease: more than a client's threads in one call each

  // Maps the journal at `path` for a region of `slots` lease slots. `fresh`
  // (a region just created) or a file that is not a journal for that many
  // slots starts empty.
  static absl::StatusOr<std::unique_ptr<LeaseJournal>> open(const std::string& path, uint32_t slots, bool fresh);
  ~LeaseJournal();
  LeaseJournal(const LeaseJournal&) = delete;
  LeaseJournal& operator=(const LeaseJournal&) = delete;

  enum class Seen {
    kNew,       // not answered yet: apply it
    kAnswered,  // `*answer` is what it was answered
    kTooOld,    // older than every answer kept: its outcome is not known
  };
  // Every call below REQUIRES the region's lock.
  //
  // The slot's answers belong to one process (pid and start time): a caller
  // that is another (the slot was given out again) starts them afresh.
  void bind(uint32_t slot, pid_t pid, uint64_t start_time);
  // Looks `request` up in `slot`'s answers.
  Seen look_up(uint32_t slot, uint64_t request, JournalEntry* answer) const;
  // A request the client gave up on. Answered, a Lease or LeaseRun's entry
  // is returned (for its grant to be taken back) and kept granting nothing;
  // not seen yet (still on its way, on another stream), it is marked, so that
  // it is refused when it arrives instead of granting blocks nobody receives.
  // False if there is no grant to take back.
  bool forget_grant(uint32_t slot, uint64_t request, JournalEntry* grant);

  // The call about to change the region (pages: a release's blocks).
  void begin(uint32_t slot, uint64_t request, JournalOp op, const uint32_t* pages, uint32_t n);
  // What a lease call has granted so far: undone if the daemon dies first.
  void granted(const uint32_t* pages, uint32_t n);
  // The call's answer is kept and the intent cleared; `request` 0 only
  // clears the intent (a call not to be remembered, or one undone).
  void finish(uint32_t slot, const JournalEntry& answer);
  void abandon_intent();
  // A call a daemon died in, or null.
  const JournalIntent* leftover() const;

  // The slot was given out again or its process is gone.
  void clear_slot(uint32_t slot);

  const std::string& path() const { return path_; }

 private:
  struct Header;
  struct SlotAnswers;
  LeaseJournal() = default;
  SlotAnswers& slot(uint32_t i) const;
  static void keep(SlotAnswers& s, const JournalEntry& answer);

  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  uint32_t slots_ = 0;
  Header* header_ = nullptr;
};

}  // namespace memd::daemon
