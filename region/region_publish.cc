// Region::reserve / publish / cancel over the publish log (publish_log.h).
#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "heap/crash_point.h"
#include "heap/inspect.h"
#include "heap/region_format.h"
#include "region/publish_log.h"
#include "region/region.h"
#include "region/region_impl.h"

namespace memd {
namespace {

region::PublishEntry* log_at(const RegionImpl& impl, void* p, uint64_t bytes) {
  if (p == nullptr || reinterpret_cast<uintptr_t>(p) % alignof(region::PublishEntry) != 0 ||
      bytes < uint64_t{region::kPublishEntries} * sizeof(region::PublishEntry)) {
    return nullptr;
  }
  return static_cast<region::PublishEntry*>(p);
}

}  // namespace

region::PersistFn RegionImpl::persist_fn() const {
  return [this](const void* p, size_t n) {
    // The discipline rounds out to what it must (pages for msync).
    (void)source->persist(static_cast<size_t>(static_cast<const char*>(p) - region.base), n);
  };
}

region::PublishEntry* RegionImpl::find_publish_log() const {
  if (region::PublishEntry* log = publish_log.load(std::memory_order_acquire)) return log;
  uint64_t bytes = 0;
  void* p = ready_root(region::kPublishLogRoot, root_type_hash(region::kPublishLogType), &bytes);
  region::PublishEntry* log = log_at(*this, p, bytes);
  if (log != nullptr) publish_log.store(log, std::memory_order_release);
  return log;
}

void RegionImpl::settle_publish_log(const std::function<bool(uint32_t holder)>& dead,
                                    const std::function<bool(uint64_t object)>& live) {
  if (region::PublishEntry* log = find_publish_log()) region::settle_publish_log(region, log, dead, persist_fn(), live);
}

region::PublishEntry* Region::publish_log() {
  if (region::PublishEntry* log = impl_->find_publish_log()) return log;
  if (impl_->read_only) {
    errno = EROFS;
    return nullptr;
  }
  uint64_t type = type_hash(region::kPublishLogType);
  size_t bytes = size_t{region::kPublishEntries} * sizeof(region::PublishEntry);
  auto [mem, construct] = reserve_root(region::kPublishLogRoot, bytes, alignof(region::PublishEntry), type, true);
  if (mem != nullptr && construct) {
    std::memset(mem, 0, bytes);
    (void)persist(mem, bytes);
    publish_root(region::kPublishLogRoot, true);
  }
  return impl_->find_publish_log();
}

void Region::free_orphaned_reservations() {
  region::PublishEntry* log = impl_->find_publish_log();
  if (log == nullptr || !impl_->registered) return;
  const uint32_t me = impl_->pool.holder();
  for (uint32_t i = 0; i < region::kPublishEntries; ++i) {
    region::PublishEntry& e = log[i];
    uint32_t orphan = region::kOrphanHolder;
    if (e.holder.load(std::memory_order_relaxed) != orphan ||
        !e.holder.compare_exchange_strong(orphan, me, std::memory_order_acq_rel)) {
      continue;
    }
    uint64_t object = e.object;
    // The entry first, durable, then the object: a crash between leaks the
    // object rather than freeing it twice.
    region::release_publish_entry(e, impl_->persist_fn());
    if (object != 0 && object - 1 < impl_->region.data_bytes) {
      void* p = impl_->region.data + (object - 1);
      if (size(p) != 0) free(p);
    }
  }
}

void* Region::reserve(size_t size) {
  if (impl_->method != Method::kBest) {
    errno = ENOTSUP;
    return nullptr;
  }
  region::PublishEntry* log = publish_log();
  if (log == nullptr) return nullptr;
  const uint32_t me = impl_->pool.holder();
  region::PublishEntry* e = nullptr;
  for (int pass = 0; pass < 2 && e == nullptr; ++pass) {
    for (uint32_t i = 0; i < region::kPublishEntries; ++i) {
      uint32_t none = 0;
      if (log[i].holder.load(std::memory_order_relaxed) == 0 &&
          log[i].holder.compare_exchange_strong(none, me, std::memory_order_acq_rel)) {
        e = &log[i];
        break;
      }
    }
    // Full: entries of dead processes may be waiting to be freed.
    if (e == nullptr && pass == 0) free_orphaned_reservations();
  }
  if (e == nullptr) {
    errno = EAGAIN;  // every entry holds a reservation
    return nullptr;
  }
  // Never a large chunk: see ThreadHeap::alloc_recoverable.
  heap::ThreadHeap* h = impl_->thread_heap();
  void* p = h ? h->alloc_recoverable(size) : nullptr;
  if (p == nullptr) {
    int saved = errno;
    impl_->event(RegionEvent::kNoMemory, nullptr, "allocation failed");
    region::release_publish_entry(*e, impl_->persist_fn());
    errno = saved;
    return nullptr;
  }
  // A crash before this store leaks the object (one in flight); after it,
  // recovery frees it.
  e->object = offset_of(p) + 1;
  e->link = e->value = e->batch = e->leader = 0;
  region::seal_publish_entry(*e, region::kEntryReserved);
  heap::crash_point("publish.reserved");  // reserved, never to be published
  return p;
}

// This process's entry reserving `p`, or nullptr.
static region::PublishEntry* entry_of(const RegionImpl& impl, const void* p) {
  region::PublishEntry* log = impl.find_publish_log();
  if (log == nullptr || !impl.region.contains(p)) return nullptr;
  const uint64_t object = impl.region.offset_of(p) + 1;
  const uint32_t me = impl.pool.holder();
  for (uint32_t i = 0; i < region::kPublishEntries; ++i) {
    region::PublishEntry& e = log[i];
    if (e.holder.load(std::memory_order_acquire) == me && e.object == object &&
        region::entry_state(e.state.load(std::memory_order_acquire)) == region::kEntryReserved) {
      return &e;
    }
  }
  return nullptr;
}

void RegionImpl::persist_allocation(const void* p, size_t bytes) const {
  region::PersistFn persist = persist_fn();
  // The object: a reservation is segregated or whole pages of its own, so
  // it has no header before it (ThreadHeap::alloc_recoverable).
  persist(p, bytes);
  heap::PageIndex page{static_cast<uint32_t>(region.offset_of(p) >> heap::kPageShift)};
  heap::PageIndex block{region.page(page).block};
  // What makes it live: its block's page descriptors, the header's committed
  // mark (pages above it are free to recovery) and its block descriptor.
  // The first two do not change while the block is in use, except where
  // the heap clears the block's mark (a new block, a block resized): once a
  // publish made them durable, later ones in the block skip them. The
  // committed mark can fall (a trim) only to above every block in use.
  heap::BlockDesc& desc = region.block(block);
  if (!heap::descriptors_durable(desc)) {
    uint32_t pages = desc.pages.value;
    if (pages == 0 || pages > region.page_limit() - block.value) pages = 1;
    persist(&region.page_descs[block.value], size_t{pages} * sizeof(heap::PackedPageDesc));
    persist(&region.header->page_heap.committed_pages, sizeof region.header->page_heap.committed_pages);
    heap::set_descriptors_durable(desc, true);
  }
  persist(&desc, sizeof(heap::BlockDesc));
}

absl::Status Region::publish(void* object, std::atomic<uint64_t>* link, uint64_t value) {
  region::PublishEntry* e = entry_of(*impl_, object);
  if (e == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(impl_->name, ": publish of ", absl::Hex(reinterpret_cast<uintptr_t>(object)),
                                                   ", which is no reservation of this process"));
  }
  if (!contains(link) || region::publish_link_at(impl_->region, offset_of(link)) != link) {
    return absl::InvalidArgumentError(absl::StrCat(impl_->name, ": publish into ", absl::Hex(reinterpret_cast<uintptr_t>(link)),
                                                   ", which is no 8-byte word of the region's data"));
  }
  size_t bytes = size(object);
  if (bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(impl_->name, ": the reservation at ",
                                                   absl::Hex(reinterpret_cast<uintptr_t>(object)), " is no live object"));
  }
  region::PersistFn persist = impl_->persist_fn();
  // 1. The object, and what makes it live, reach the medium.
  impl_->persist_allocation(object, bytes);
  // 2. The intent, sealed and durable in one persist: from here on,
  // recovery finishes the publish.
  e->link = offset_of(link);
  e->value = value;
  region::seal_publish_entry(*e, region::kEntryPublishing);
  persist(e, sizeof *e);
  heap::crash_point("publish.intent");  // the entry durable, the link not yet stored
  // 3. The link.
  link->store(value, std::memory_order_release);
  persist(link, sizeof *link);
  // 4. Done: the entry is free again.
  region::release_publish_entry(*e, persist);
  return absl::OkStatus();
}

absl::Status Region::publish(const PublishItem* items, size_t n) {
  if (n == 1) return publish(items[0].object, items[0].link, items[0].value);
  if (n == 0) return absl::OkStatus();
  if (items == nullptr || n > kMaxPublishBatch) {
    return absl::InvalidArgumentError(absl::StrCat(impl_->name, ": a batch publish takes 1 to ", kMaxPublishBatch,
                                                   " items, not ", n));
  }
  region::PublishEntry* entries[kMaxPublishBatch];
  for (size_t i = 0; i < n; ++i) {
    const PublishItem& it = items[i];
    entries[i] = entry_of(*impl_, it.object);
    if (entries[i] == nullptr || size(it.object) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(impl_->name, ": item ", i, " of the batch: ",
                                                     absl::Hex(reinterpret_cast<uintptr_t>(it.object)),
                                                     " is no reservation of this process"));
    }
    if (!contains(it.link) || region::publish_link_at(impl_->region, offset_of(it.link)) != it.link) {
      return absl::InvalidArgumentError(absl::StrCat(impl_->name, ": item ", i, " of the batch: ",
                                                     absl::Hex(reinterpret_cast<uintptr_t>(it.link)),
                                                     " is no 8-byte word of the region's data"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (items[j].object == it.object || items[j].link == it.link) {
        return absl::InvalidArgumentError(absl::StrCat(impl_->name, ": item ", i, " of the batch repeats the ",
                                                       items[j].object == it.object ? "object" : "link", " of item ", j));
      }
    }
  }
  region::PersistFn persist = impl_->persist_fn();
  region::PublishEntry* log = impl_->find_publish_log();
  region::PublishEntry& leader = *entries[0];
  const uint64_t leader_index = static_cast<uint64_t>(&leader - log) + 1;
  // Nonzero, and new for every batch: a leader entry reused by a later
  // batch must not commit an older one's leftovers.
  static std::atomic<uint64_t> batches{0};
  const uint64_t batch = heap::random_secret() ^ (batches.fetch_add(1, std::memory_order_relaxed) + 1);
  // 1. Every object, and what makes it live, reach the medium.
  for (size_t i = 0; i < n; ++i) impl_->persist_allocation(items[i].object, size(items[i].object));
  // 2. Every entry records its link and value, durable, as one of the batch.
  for (size_t i = 0; i < n; ++i) {
    region::PublishEntry& e = *entries[i];
    e.link = offset_of(items[i].link);
    e.value = items[i].value;
    e.batch = batch == 0 ? 1 : batch;
    e.leader = leader_index;
    region::seal_publish_entry(e, region::kEntryBatched);
    persist(&e, sizeof e);
  }
  heap::crash_point("publish.batch_intent");  // recorded, not committed: undone
  // 3. The commit: from here on, recovery stores every link.
  region::set_publish_state(leader, region::kEntryPublishing);
  persist(&leader.state, sizeof leader.state);
  heap::crash_point("publish.batch_commit");  // committed, links not stored: finished
  // 4. The links.
  for (size_t i = 0; i < n; ++i) {
    items[i].link->store(items[i].value, std::memory_order_release);
    persist(items[i].link, sizeof *items[i].link);
  }
  // 5. The followers, then the leader (a follower left after its leader
  // would read as uncommitted).
  for (size_t i = 1; i < n; ++i) region::release_publish_entry(*entries[i], persist);
  region::release_publish_entry(leader, persist);
  return absl::OkStatus();
}

absl::Status Region::cancel(void* object) {
  region::PublishEntry* e = entry_of(*impl_, object);
  if (e == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(impl_->name, ": cancel of ", absl::Hex(reinterpret_cast<uintptr_t>(object)),
                                                   ", which is no reservation of this process"));
  }
  // The entry first: a crash between leaks the object, never frees it twice.
  region::release_publish_entry(*e, impl_->persist_fn());
  free(object);
  return absl::OkStatus();
}

}  // namespace memd
