// Failure-atomic publish (Region::reserve / publish / cancel): the log in the
// region that makes a new object and the link to it durable together.
//
// A reserved object is named by an entry of the log, claimed by the holder
// tag of the process that reserved it (the owner's kProcessHolder, a
// client's lease slot + 1). Publishing makes the object and the metadata
// that makes it live durable, then records the link and its new value in
// the entry with the state kPublishing (one persist), stores the value into
// the link (durable) and sets the entry empty (durable) before it returns.
// So whatever a crash or a power cut leaves, the entry says what to finish:
//   kReserved    the object was never published: it is freed;
//   kPublishing  the link may or may not hold its value: it is stored again;
//   kBatched     one of a batch (Region::publish of several items): the
//                batch's leader entry (one of its own) decides. Every entry
//                of the batch is recorded kBatched, durable, before the
//                leader turns kPublishing (durable: the batch's commit); the
//                links are stored after it, and the followers emptied before
//                the leader. So a leader still kBatched (or gone) means no
//                link was stored: freed as kReserved; a leader kPublishing
//                means every link is stored again;
//   empty        nothing to do.
//
// Sealed entries. A medium keeps only aligned 8-byte stores whole (a power
// cut can leave a 64-byte entry half old, half new), so an entry is written
// in one persist and proves itself: the state word carries, beside the
// state, a nonce that every sealing changes, and `check` is a hash of the
// fields with that nonce. Whatever mix of an old and a new entry a cut
// leaves, a state whose check does not match its fields is a sealing that
// never finished: the link was not stored yet, and the object it names may
// be stale, so nothing is done but leaking that one reservation. Emptying an
// entry changes its state word alone (one aligned store), so a cut there
// leaves the whole entry as it was, or empty. Entries with nonce 0 were
// written before sealing and are taken as they are.
//
// Recovery (an owner's open) and the reclaim of a dead client settle their
// entries without the heap: a kPublishing entry is redone at once, a
// kReserved one is handed to the region's live processes as an orphan,
// which the next process that reserves (or the owner's open) frees.
//
// The entries are memory every process of the region writes: every offset
// in one is checked before it is used, and an entry that names no live
// object or no word of the data pages is dropped.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "heap/layout.h"

namespace memd::region {

enum PublishState : uint32_t { kEntryEmpty = 0, kEntryReserved = 1, kEntryPublishing = 2, kEntryBatched = 3 };

// A holder tag no process has: the entry's object is an orphan, free to free.
inline constexpr uint32_t kOrphanHolder = 0xfffffffeu;

struct alignas(64) PublishEntry {
  std::atomic<uint32_t> holder;  // 0: free
  std::atomic<uint32_t> state;   // nonce << 8 | a PublishState (entry_state, entry_nonce)
  uint64_t object;               // its offset in the data pages + 1
  uint64_t link;                 // kPublishing: the link's offset in the data pages
  uint64_t value;                // kPublishing: what the link gets
  uint64_t batch;                // kBatched, and a batch's kPublishing leader: the batch's id (nonzero)
  uint64_t leader;               // kBatched: the index + 1 of the batch's leader entry
  uint64_t check;                // entry_check of the fields above and the nonce
  uint64_t pad;
};
static_assert(sizeof(PublishEntry) == 64);
static_assert(offsetof(PublishEntry, state) == 4 && offsetof(PublishEntry, check) == 48);

inline constexpr uint32_t entry_state(uint32_t word) { return word & 0xffu; }
inline constexpr uint32_t entry_nonce(uint32_t word) { return word >> 8; }

// The hash of an entry's fields under `nonce` (the state is not in it: a
// batch's leader commits by changing its state alone).
uint64_t entry_check(const PublishEntry& e, uint32_t nonce);

// Whether the entry's fields are the ones its state word was sealed with
// (or it predates sealing: nonce 0).
bool entry_sealed(const PublishEntry& e);

// Writes the check for the entry's fields under a new nonce, then the state
// word: `state` with that nonce. The caller persists the entry after.
void seal_publish_entry(PublishEntry& e, PublishState state);

inline constexpr uint32_t kPublishEntries = 256;
inline constexpr const char* kPublishLogRoot = "memd:publish-log";
inline constexpr const char* kPublishLogType = "memd::region::PublishEntry[]";

// Makes [p, p + n) of the region's mapping durable.
using PersistFn = std::function<void(const void* p, size_t n)>;

// The link word at `offset` in the data pages, if it is one (inside them,
// 8-byte aligned); nullptr otherwise.
std::atomic<uint64_t>* publish_link_at(const heap::Region& r, uint64_t offset);

// Settles the entries of every holder `dead` names: kPublishing ones are
// finished and emptied, kReserved ones become orphans, others are emptied.
// With `live` given (after a recovery), a reservation whose object it says
// is not live is emptied instead: after a power cut, the entry can reach the
// medium before the allocation it names did, and freeing that object would
// free memory the heap holds free. Returns the orphans made.
uint32_t settle_publish_log(const heap::Region& r, PublishEntry* log, const std::function<bool(uint32_t)>& dead,
                            const PersistFn& persist, const std::function<bool(uint64_t object)>& live = nullptr);

// Whether the batch of kBatched entry `e` was committed: its leader is an
// entry of the same holder and batch, kPublishing.
bool publish_batch_committed(const PublishEntry* log, const PublishEntry& e);

// Sets the entry's state and keeps its nonce, so its check stays valid (one
// aligned store: a batch leader's commit, a settled batch's undoing).
void set_publish_state(PublishEntry& e, PublishState state);

// Empties an entry: its state word alone (durable), then its holder.
void release_publish_entry(PublishEntry& e, const PersistFn& persist);

}  // namespace memd::region
