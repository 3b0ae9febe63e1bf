#include "region/publish_log.h"

namespace memd::region {
namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 33);
}

}  // namespace

std::atomic<uint64_t>* publish_link_at(const heap::Region& r, uint64_t offset) {
  if (offset % alignof(std::atomic<uint64_t>) != 0 || offset >= r.data_bytes ||
      r.data_bytes - offset < sizeof(uint64_t)) {
    return nullptr;
  }
  return reinterpret_cast<std::atomic<uint64_t>*>(r.data + offset);
}

void set_publish_state(PublishEntry& e, PublishState state) {
  uint32_t word = e.state.load(std::memory_order_relaxed);
  e.state.store((word & ~0xffu) | state, std::memory_order_release);
}

uint64_t entry_check(const PublishEntry& e, uint32_t nonce) {
  uint64_t h = mix(0x6d656d642d6c6f67ull, nonce);
  for (uint64_t v : {e.object, e.link, e.value, e.batch, e.leader}) h = mix(h, v);
  return h == 0 ? 1 : h;  // never the 0 of a zeroed entry
}

bool entry_sealed(const PublishEntry& e) {
  uint32_t nonce = entry_nonce(e.state.load(std::memory_order_acquire));
  return nonce == 0 || e.check == entry_check(e, nonce);
}

void seal_publish_entry(PublishEntry& e, PublishState state) {
  uint32_t nonce = (entry_nonce(e.state.load(std::memory_order_relaxed)) + 1) & 0xffffffu;
  if (nonce == 0) nonce = 1;  // 0 is an entry written before sealing
  e.check = entry_check(e, nonce);
  e.state.store(nonce << 8 | state, std::memory_order_release);
}

bool publish_batch_committed(const PublishEntry* log, const PublishEntry& e) {
  if (e.batch == 0 || e.leader == 0 || e.leader > kPublishEntries) return false;
  const PublishEntry& l = log[e.leader - 1];
  return l.holder.load(std::memory_order_acquire) == e.holder.load(std::memory_order_acquire) &&
         l.batch == e.batch && entry_state(l.state.load(std::memory_order_acquire)) == kEntryPublishing &&
         entry_sealed(l);
}

void release_publish_entry(PublishEntry& e, const PersistFn& persist) {
  // One aligned store: a cut leaves the entry whole as it was, or empty.
  set_publish_state(e, kEntryEmpty);
  // Durable before the entry can be claimed again: a cut must not bring
  // back a kPublishing entry whose link has been changed since.
  persist(&e.state, sizeof e.state);
  e.holder.store(0, std::memory_order_release);
}

uint32_t settle_publish_log(const heap::Region& r, PublishEntry* log, const std::function<bool(uint32_t)>& dead,
                            const PersistFn& persist, const std::function<bool(uint64_t object)>& live) {
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
    if (entry_state(e.state.load(std::memory_order_acquire)) != kEntryBatched || e.leader == i + 1) continue;
    if (!entry_sealed(e)) continue;  // emptied below
    if (publish_batch_committed(log, e)) {
      redo(e);
      release_publish_entry(e, persist);
    } else {
      set_publish_state(e, kEntryReserved);
      persist(&e.state, sizeof e.state);
    }
  }
  for (uint32_t i = 0; i < kPublishEntries; ++i) {
    PublishEntry& e = log[i];
    uint32_t holder = e.holder.load(std::memory_order_acquire);
    if (holder == 0 || holder == kOrphanHolder || !dead(holder)) continue;
    uint32_t state = entry_state(e.state.load(std::memory_order_acquire));
    // A sealing a cut left unfinished: its link was never stored, and the
    // object it names may be another's. That one reservation leaks.
    if (state != kEntryEmpty && !entry_sealed(e)) state = kEntryEmpty;
    if (state == kEntryBatched) state = kEntryReserved;  // a leader that never committed
    if (state == kEntryPublishing) {
      redo(e);
    } else if (state == kEntryReserved && e.object != 0 && (!live || live(e.object - 1))) {
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
