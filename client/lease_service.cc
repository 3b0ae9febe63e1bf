#include "client/lease_service.h"

#include <time.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "heap/block.h"
#include "heap/page_heap.h"
#include "heap/recovery.h"
#include "heap/remote_free.h"

namespace memd::client {

using heap::AcquiredBlock;
using heap::LeaseSlot;
using heap::LeaseState;
using heap::PageIndex;
using heap::PageKind;

uint64_t process_start_time(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return 0;
  char buf[1024];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // Field 22; the command name (field 2) may hold spaces and parentheses,
  // so count from the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr || p[1] == '\0') return 0;
  // A zombie has exited: it holds no mapping any more.
  if (p[2] == 'Z' || p[2] == 'X') return 0;
  int field = 2;
  for (; *p != '\0' && field < 22; ++p) {
    if (*p == ' ') ++field;
  }
  return std::strtoull(p, nullptr, 10);
}

namespace {

uint64_t wall_ms() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000 + uint64_t(ts.tv_nsec) / 1000000;
}

absl::Status no_memory() {
  return absl::ResourceExhaustedError(absl::StrCat("region out of memory: ", std::strerror(errno)));
}

}  // namespace

absl::Status LeaseService::check_client(uint32_t client) const {
  const heap::Region& r = pages_->region();
  if (client >= r.header->max_clients ||
      r.leases[client].state.load(std::memory_order_acquire) != LeaseState::kActive) {
    return absl::FailedPreconditionError(absl::StrCat("no active lease in slot ", client));
  }
  return absl::OkStatus();
}

bool LeaseService::holds_slot(uint32_t client, heap::OwnerId owner) const {
  const heap::Region& r = pages_->region();
  uint32_t slot = heap::slot_of(owner);
  return owner != heap::kNoOwner && slot < r.header->max_owners &&
         r.slots[slot].in_use.load(std::memory_order_acquire) == client + 1;
}

absl::StatusOr<ClientLease> LeaseService::register_client(pid_t pid, uint64_t start_time) {
  const heap::Region& r = pages_->region();
  pages_->lock();
  for (uint32_t i = 0; i < r.header->max_clients; ++i) {
    LeaseSlot& l = r.leases[i];
    if (l.state.load(std::memory_order_acquire) != LeaseState::kFree) continue;
    // The stash's owner slot, tagged like the client's thread heaps so that
    // reclaiming the client takes the stash too.
    uint32_t holder = i + 1;
    uint32_t stash_slot = UINT32_MAX;
    for (uint32_t s = 0; s < r.header->max_owners; ++s) {
      uint32_t expected = 0;
      if (r.slots[s].in_use.compare_exchange_strong(expected, holder, std::memory_order_acq_rel)) {
        stash_slot = s;
        break;
      }
    }
    if (stash_slot == UINT32_MAX) break;
    uint32_t gen = static_cast<uint32_t>(r.slots[stash_slot].pending.load(std::memory_order_relaxed) >> 32) + 1;
    heap::OwnerId stash = gen << heap::kOwnerSlotBits | stash_slot;
    heap::pending_open(r, stash);
    l.generation += 1;
    l.pid = pid;
    l.start_time = start_time;
    l.stash_owner = stash;
    l.blocks.store(0, std::memory_order_relaxed);
    l.leases.store(0, std::memory_order_relaxed);
    l.leased_at_ms = wall_ms();
    l.state.store(LeaseState::kActive, std::memory_order_release);
    pages_->unlock();
    return ClientLease{i, holder, stash};
  }
  pages_->unlock();
  return absl::ResourceExhaustedError(
      absl::StrCat("every lease slot (", r.header->max_clients, ") or owner slot is taken"));
}

absl::StatusOr<uint32_t> LeaseService::lease(uint32_t client, PageKind kind, uint16_t cls,
                                              heap::OwnerId owner, uint32_t count, AcquiredBlock* out) {
  if (absl::Status s = check_client(client); !s.ok()) return s;
  const heap::Region& r = pages_->region();
  const heap::SizeClasses& classes = pages_->classes();
  if (kind == PageKind::kSegregated) {
    if (cls < classes.first_class() || cls > classes.last_class()) {
      return absl::InvalidArgumentError(absl::StrCat("no size class ", cls));
    }
  } else if (kind != PageKind::kLarge || cls != 0) {
    return absl::InvalidArgumentError("blocks are leased for a size class or for large objects");
  }
  if (count == 0 || count > kMaxLeaseBatch) {
    return absl::InvalidArgumentError(absl::StrCat("lease batch of ", count, " blocks (1..", kMaxLeaseBatch, ")"));
  }
  if (!holds_slot(client, owner)) {
    return absl::PermissionDeniedError(absl::StrCat("owner id ", owner, " is not held by lease slot ", client));
  }
  LeaseSlot& l = r.leases[client];
  uint32_t n = 0;
  for (; n < count; ++n) {
    // The first block may be an adopted one, for the asking thread heap;
    // spare blocks go to the stash and must be fresh.
    AcquiredBlock b = pages_->acquire(kind, cls, n == 0 ? owner : l.stash_owner);
    if (b.first == heap::kNoPage) break;
    if (b.adopted && n > 0) {
      pages_->abandon(b.first);  // not for the stash: leave it for the next thread
      break;
    }
    out[n] = b;
    if (b.adopted) {
      ++n;
      break;
    }
  }
  if (n == 0) return no_memory();
  l.blocks.fetch_add(n, std::memory_order_relaxed);
  l.leases.fetch_add(1, std::memory_order_relaxed);
  return n;
}

absl::Status LeaseService::give_back(uint32_t client, const PageIndex* blocks, uint32_t n) {
  if (absl::Status s = check_client(client); !s.ok()) return s;
  const heap::Region& r = pages_->region();
  uint32_t committed = r.header->page_heap.committed_pages.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < n; ++i) {
    PageIndex p = blocks[i];
    if (p.value >= committed) return absl::InvalidArgumentError(absl::StrCat("page ", p.value, " is not in the region"));
    heap::PageDesc d = r.page(p);
    if ((d.kind != PageKind::kSegregated && d.kind != PageKind::kLarge) || d.block != p.value) {
      return absl::InvalidArgumentError(absl::StrCat("page ", p.value, " does not start a block"));
    }
    heap::BlockDesc& b = r.block(p);
    // The client disowns a block before giving it back; its stash's blocks
    // it may give back owned by the stash.
    uint32_t word = b.owner_word.load(std::memory_order_acquire);
    if (word != 0 && !(heap::owner_of(word) == r.leases[client].stash_owner &&
                       b.owner_word.compare_exchange_strong(word, 0))) {
      return absl::FailedPreconditionError(absl::StrCat("block ", p.value, " is still owned by ", heap::owner_of(word)));
    }
    // Trust nothing the client says about the contents: count them.
    uint64_t leaked = 0;
    bool empty = heap::block_repair(r, pages_->classes(), p, &leaked);
    r.header->leaked_objects += leaked;
    if (empty) pages_->release(p);
    else pages_->abandon(p);
    r.leases[client].blocks.fetch_sub(1, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

absl::StatusOr<AcquiredBlock> LeaseService::acquire_huge(uint32_t client, heap::PageCount pages,
                                                         heap::PageCount align) {
  if (absl::Status s = check_client(client); !s.ok()) return s;
  if (pages.value == 0 || align.value == 0 || (align.value & (align.value - 1)) != 0) {
    return absl::InvalidArgumentError("huge run of 0 pages or an alignment not a power of two");
  }
  AcquiredBlock b = pages_->acquire_huge(pages, align);
  if (b.first == heap::kNoPage) return no_memory();
  return b;
}

namespace {
absl::Status check_huge(const heap::Region& r, PageIndex first) {
  uint32_t committed = r.header->page_heap.committed_pages.load(std::memory_order_acquire);
  if (first.value >= committed || r.page(first).kind != PageKind::kHuge || r.page(first).block != first.value) {
    return absl::InvalidArgumentError(absl::StrCat("page ", first.value, " does not start a huge object"));
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status LeaseService::release_huge(uint32_t client, PageIndex first) {
  if (absl::Status s = check_client(client); !s.ok()) return s;
  if (absl::Status s = check_huge(pages_->region(), first); !s.ok()) return s;
  pages_->release_huge(first);
  return absl::OkStatus();
}

absl::StatusOr<bool> LeaseService::resize_huge(uint32_t client, PageIndex first, heap::PageCount want,
                                                bool* zeroed) {
  if (absl::Status s = check_client(client); !s.ok()) return s;
  if (absl::Status s = check_huge(pages_->region(), first); !s.ok()) return s;
  if (want.value == 0) return absl::InvalidArgumentError("resize to 0 pages");
  return pages_->resize_huge(first, want, zeroed);
}

void LeaseService::client_gone(uint32_t client) {
  const heap::Region& r = pages_->region();
  if (client >= r.header->max_clients) return;
  LeaseSlot& l = r.leases[client];
  if (l.state.load(std::memory_order_acquire) != LeaseState::kActive) return;
  l.state.store(LeaseState::kReclaiming, std::memory_order_release);
  std::vector<PageIndex> keep;
  pages_->lock();
  uint64_t leaked = 0;
  heap::reclaim_holder(r, pages_->classes(), client + 1, now_ms(), [&](PageIndex b) { keep.push_back(b); },
                       &leaked);
  pages_->unlock();
  for (PageIndex b : keep) pages_->abandon(b);
  r.header->leaked_objects += leaked;
  l.blocks.store(0, std::memory_order_relaxed);
  l.pid = 0;
  l.state.store(LeaseState::kFree, std::memory_order_release);
}

}  // namespace memd::client
