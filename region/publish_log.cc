#include "region/publish_log.h"

namespace memd::region {

std::atomic<uint64_t>* publish_link_at(const heap::Region& r, uint64_t offset) {
  if (offset % alignof(std::atomic<uint64_t>) != 0 || offset >= r.data_bytes ||
      r.data_bytes - offset < sizeof(uint64_t)) {
    return nullptr;
  }
  return reinterpret_cast<std::atomic<uint64_t>*>(r.data + offset);
}

bool publish_batch_committed(const PublishEntry* log, const PublishEntry& e) {
  if (e.batch == 0 || e.leader == 0 || e.leader > kPublishEntries) return false;
  const PublishEntry& l = log[e.leader - 1];
  return l.holder.load(std::memory_order_acquire) == e.holder.load(std::memory_order_acquire) &&
         l.batch == e.batch && l.state.load(std::memory_order_acquire) == kEntryPublishing;
}

void release_publish_entry(PublishEntry& e, const PersistFn& persist) {
  e.state.store(kEntryEmpty, std::memory_order_relaxed);
  e.object = e.link = e.value = e.batch = e.leader = 0;
  // Durable before the entry can be claimed again: a cut must not bring
  // back a kPublishing entry whose link has been changed since.
  persist(&e, sizeof e);
  e.holder.store(0, std::memory_order_release);
}

uint32_t settle_publish_log(const heap::Region& r, PublishEntry* log, const std::function<bool(uint32_t)>& dead,
                            const PersistFn& persist) {
  uint32_t orphans = 0;
  auto redo = [&](const PublishEntry& e) {
    // Redone whether or not the store reached the medium: the value is the
    // entry's, and the entry was durable before the store began.
    if (std::atomic<uint64_t>* link = publish_link_at(r, e.link)) {
      link->store(e.value, std::memory_order_release);
      persist(link, sizeof *link);
    }
  };
  // Batches first, while their leaders still say whether they committed:
  // a committed batch's links are stored again, an uncommitted one's
  // objects are freed as reservations (none of its links was stored).
  for (uint32_t i = 0; i < kPublishEntries; ++i) {
    PublishEntry& e = log[i];
    uint32_t holder = e.holder.load(std::memory_order_acquire);
    if (holder == 0 || holder == kOrphanHolder || !dead(holder)) continue;
    if (e.state.load(std::memory_order_acquire) != kEntryBatched || e.leader == i + 1) continue;
    if (publish_batch_committed(log, e)) {
      redo(e);
      release_publish_entry(e, persist);
    } else {
      e.state.store(kEntryReserved, std::memory_order_release);
      persist(&e, sizeof e);
    }
  }
  for (uint32_t i = 0; i < kPublishEntries; ++i) {
    PublishEntry& e = log[i];
    uint32_t holder = e.holder.load(std::memory_order_acquire);
    if (holder == 0 || holder == kOrphanHolder || !dead(holder)) continue;
    uint32_t state = e.state.load(std::memory_order_acquire);
    if (state == kEntryBatched) state = kEntryReserved;  // a leader that never committed
    if (state == kEntryPublishing) {
      redo(e);
    } else if (state == kEntryReserved && e.object != 0) {
      e.holder.store(kOrphanHolder, std::memory_order_release);
      persist(&e, sizeof e);
      ++orphans;
      continue;
    }
    release_publish_entry(e, persist);
  }
  return orphans;
}

}  // namespace memd::region
