// Failure-atomic publish (Region::reserve / publish / cancel): the log in the
// region that makes a new object and the link to it durable together.
//
// A reserved object is named by an entry of the log, claimed by the holder
// tag of the process that reserved it (the owner's kProcessHolder, a
// client's lease slot + 1). Publishing makes the object and the metadata
// that makes it live durable, then records the link and its new value in
// the entry (kPublishing, durable), stores the value into the link (durable)
// and clears the entry (durable) before it returns. So whatever a crash or
// a power cut leaves, the entry says what to finish:
//   kReserved    the object was never published: it is freed;
//   kPublishing  the link may or may not hold its value: it is stored again;
//   kBatched     one of a batch (Region::publish of several items): the
//                batch's leader entry (one of its own) decides. Every entry
//                of the batch is recorded kBatched, durable, before the
//                leader turns kPublishing (durable: the batch's commit); the
//                links are stored after it, and the followers cleared before
//                the leader. So a leader still kBatched (or gone) means no
//                link was stored: freed as kReserved; a leader kPublishing
//                means every link is stored again;
//   empty        nothing to do.
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
  std::atomic<uint32_t> state;   // a PublishState
  uint64_t object;               // its offset in the data pages + 1
  uint64_t link;                 // kPublishing: the link's offset in the data pages
  uint64_t value;                // kPublishing: what the link gets
  uint64_t batch;                // kBatched, and a batch's kPublishing leader: the batch's id (nonzero)
  uint64_t leader;               // kBatched: the index + 1 of the batch's leader entry
  uint64_t pad[2];
};
static_assert(sizeof(PublishEntry) == 64);

inline constexpr uint32_t kPublishEntries = 256;
inline constexpr const char* kPublishLogRoot = "memd:publish-log";
inline constexpr const char* kPublishLogType = "memd::region::PublishEntry[]";

// Makes [p, p + n) of the region's mapping durable.
using PersistFn = std::function<void(const void* p, size_t n)>;

// The link word at `offset` in the data pages, if it is one (inside them,
// 8-byte aligned); nullptr otherwise.
std::atomic<uint64_t>* publish_link_at(const heap::Region& r, uint64_t offset);

// Settles the entries of every holder `dead` names: kPublishing ones are
// finished and cleared, kReserved ones become orphans, others are cleared.
// Returns the orphans made.
uint32_t settle_publish_log(const heap::Region& r, PublishEntry* log, const std::function<bool(uint32_t)>& dead,
                            const PersistFn& persist);

// Whether the batch of kBatched entry `e` was committed: its leader is an
// entry of the same holder and batch, kPublishing.
bool publish_batch_committed(const PublishEntry* log, const PublishEntry& e);

// Clears an entry: its fields, then (durable first) its holder.
void release_publish_entry(PublishEntry& e, const PersistFn& persist);

}  // namespace memd::region
