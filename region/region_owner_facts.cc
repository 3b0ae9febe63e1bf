// The facts a serving owner (the daemon) reads of its region: header
// counts, lease slots, residency, whether an address is a live object.
// They are read here so that the daemon includes no region internals.
#include <sys/mman.h>

#include <algorithm>
#include <vector>

#include "region/region.h"
#include "region/region_impl.h"
#include "heap/inspect.h"

namespace memd {

Region::HeaderFacts Region::header_facts() const {
  const heap::RegionHeader& h = *impl_->region.header;
  HeaderFacts f;
  f.generation = h.generation.load(std::memory_order_relaxed);
  f.recoveries = h.recoveries;
  f.leaked_objects = h.leaked_objects;
  // Sizes as the owner attached them, and the committed count cut to them:
  // callers loop and index by these.
  f.max_clients = impl_->region.max_clients;
  f.max_pages = impl_->region.page_limit();
  f.committed_bytes = uint64_t{impl_->region.committed_pages(std::memory_order_relaxed)} * heap::kPageSize;
  f.format_version = h.version;
  f.clean_close = h.clean_close.load(std::memory_order_acquire) == 1;
  return f;
}

Region::LeaseSlotFacts Region::lease_slot(uint32_t slot) const {
  const heap::LeaseSlot& l = impl_->region.leases[slot];
  LeaseSlotFacts f;
  f.active = l.state.load(std::memory_order_acquire) == heap::LeaseState::kActive;
  f.pid = l.pid;
  f.start_time = l.start_time;
  f.lease_calls = l.leases.load(std::memory_order_relaxed);
  f.stash_owner = l.stash_owner;
  return f;
}

uint64_t Region::resident_bytes() const {
  // In windows, so that a large reservation needs no large vector.
  constexpr uint64_t kWindow = uint64_t{64} << 20;
  char* base = impl_->region.data;
  uint64_t bytes = header_facts().committed_bytes;
  std::vector<unsigned char> v(kWindow / heap::kPageSize);
  uint64_t resident = 0;
  for (uint64_t off = 0; off < bytes; off += kWindow) {
    uint64_t len = std::min(kWindow, bytes - off);
    if (mincore(base + off, len, v.data()) != 0) break;
    for (uint64_t i = 0; i < (len + heap::kPageSize - 1) / heap::kPageSize; ++i) resident += v[i] & 1;
  }
  return resident * heap::kPageSize;
}

bool Region::object_starts_at(uint64_t offset) const {
  if (offset >= header_facts().committed_bytes) return false;
  char* p = impl_->region.data + offset;
  return heap::region_object_start(impl_->region, *impl_->classes, p) == p;
}

uint64_t Region::abandoned_blocks() const {
  return impl_->pages != nullptr ? impl_->pages->abandoned_blocks() : 0;
}

}  // namespace memd
