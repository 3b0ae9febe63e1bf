#include "region/lease_service.h"

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "heap/block.h"
#include "heap/crash_point.h"
#include "heap/page_heap.h"
#include "heap/recovery.h"
#include "heap/remote_free.h"

namespace memd::region {

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

LeaseService::LeaseService(PageHeapOwner* pages) : pages_(pages), held_(pages->region().max_clients, 0) {}

void LeaseService::set_held(uint32_t client, uint64_t blocks) {
  held_[client] = blocks;
  // Published for tools that read the region; the daemon reports its own.
  pages_->region().leases[client].blocks.store(blocks, std::memory_order_relaxed);
}

void LeaseService::hold(uint32_t block, uint32_t client) {
  auto [it, added] = ledger_.try_emplace(block, client);
  if (!added) set_held(it->second, held_[it->second] - 1);
  it->second = client;
  set_held(client, held_[client] + 1);
}

void LeaseService::drop(uint32_t block) {
  auto it = ledger_.find(block);
  if (it == ledger_.end()) return;
  set_held(it->second, held_[it->second] - 1);
  ledger_.erase(it);
}

uint32_t LeaseService::owning_holder(PageIndex p) const {
  const heap::Region& r = pages_->region();
  heap::OwnerId owner = heap::owner_of(r.block(p).owner_word.load(std::memory_order_acquire));
  if (owner == heap::kNoOwner || heap::slot_of(owner) >= r.max_owners) return 0;
  uint32_t holder = r.slots[heap::slot_of(owner)].in_use.load(std::memory_order_acquire);
  return holder >= 1 && holder <= r.max_clients ? holder : 0;
}

template <class Visit>
bool LeaseService::walk_runs(Visit visit) const {
  const heap::Region& r = pages_->region();
  uint32_t committed = r.committed_pages();
  for (uint32_t i = 0; i < committed;) {
    PageIndex p{i};
    uint32_t n = r.block(p).pages.value;
    // A run is stepped over whole (the descriptors inside a free one may
    // have been given back: on a full tmpfs reading them faults); a length
    // overwritten is stepped over page by page.
    bool whole = r.page(p).block == i && n != 0 && n <= committed - i;
    if (!visit(p, whole ? n : 1, starts_block(p))) return false;
    i += whole ? n : 1;
  }
  return true;
}

absl::Status LeaseService::check_client(uint32_t client) const {
  const heap::Region& r = pages_->region();
  if (client >= r.max_clients ||
      r.leases[client].state.load(std::memory_order_acquire) != LeaseState::kActive) {
    return absl::FailedPreconditionError(absl::StrCat("no active lease in slot ", client));
  }
  return absl::OkStatus();
}

bool LeaseService::holds_slot(uint32_t client, heap::OwnerId owner) const {
  const heap::Region& r = pages_->region();
  uint32_t slot = heap::slot_of(owner);
  return owner != heap::kNoOwner && slot < r.max_owners &&
         r.slots[slot].in_use.load(std::memory_order_acquire) == client + 1;
}

absl::StatusOr<ClientLease> LeaseService::register_client(pid_t pid, uint64_t start_time) {
  const heap::Region& r = pages_->region();
  pages_->lock();
  for (uint32_t i = 0; i < r.max_clients; ++i) {
    LeaseSlot& l = r.leases[i];
    if (l.state.load(std::memory_order_acquire) != LeaseState::kFree) continue;
    // The stash's owner slot, tagged like the client's thread heaps so that
    // reclaiming the client takes the stash too.
    uint32_t holder = i + 1;
    uint32_t stash_slot = UINT32_MAX;
    for (uint32_t s = 0; s < r.max_owners; ++s) {
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
      absl::StrCat("every lease slot (", r.max_clients, ") or owner slot is taken"));
}

absl::StatusOr<uint32_t> LeaseService::lease(uint32_t client, PageKind kind, uint16_t cls,
                                              heap::OwnerId owner, uint32_t count, AcquiredBlock* out) {
  std::lock_guard<std::mutex> g(mu_);
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
  heap::crash_point("lease.grant");  // blocks owned by the client, not yet in the ledger or answered
  for (uint32_t i = 0; i < n; ++i) hold(out[i].first.value, client);
  l.leases.fetch_add(1, std::memory_order_relaxed);
  return n;
}

bool LeaseService::starts_block(PageIndex p) const {
  const heap::Region& r = pages_->region();
  if (p.value >= r.committed_pages()) return false;
  heap::PageDesc d = r.page(p);
  if (d.block != p.value) return false;
  const heap::SizeClasses& classes = pages_->classes();
  uint32_t pages;
  if (d.kind == PageKind::kLarge) {
    pages = r.header->params.large_block_pages;
  } else if (d.kind == PageKind::kSegregated && d.cls >= classes.first_class() && d.cls <= classes.last_class()) {
    pages = classes.info(d.cls).block_pages;
  } else {
    return false;
  }
  return pages <= r.committed_pages() - p.value;
}

absl::Status LeaseService::check_batch(uint32_t client, const PageIndex* blocks, uint32_t n, bool in_use_ok) const {
  const heap::Region& r = pages_->region();
  if (n > kMaxReleaseBatch) {
    return absl::InvalidArgumentError(absl::StrCat("release of ", n, " blocks (at most ", kMaxReleaseBatch, ")"));
  }
  // The whole batch is checked before any of it is applied: a request that
  // names one block the caller does not hold changes nothing.
  std::vector<uint32_t> sorted(n);
  for (uint32_t i = 0; i < n; ++i) sorted[i] = blocks[i].value;
  std::sort(sorted.begin(), sorted.end());
  if (auto twice = std::adjacent_find(sorted.begin(), sorted.end()); twice != sorted.end()) {
    return absl::InvalidArgumentError(absl::StrCat("block ", *twice, " named twice in one release"));
  }
  heap::OwnerId stash = r.leases[client].stash_owner;
  for (uint32_t i = 0; i < n; ++i) {
    PageIndex p = blocks[i];
    if (!starts_block(p)) {
      return absl::InvalidArgumentError(absl::StrCat("page ", p.value, " does not start a block of the region"));
    }
    auto held = ledger_.find(p.value);
    if (held == ledger_.end() || held->second != client) {
      return absl::PermissionDeniedError(absl::StrCat("block ", p.value, " is not leased to lease slot ", client));
    }
    // The client disowns a block before giving it back, or gives it back
    // owned by its stash; owned by one of its thread heaps, it is in use.
    uint32_t word = r.block(p).owner_word.load(std::memory_order_acquire);
    if (!in_use_ok && word != 0 && heap::owner_of(word) != stash) {
      return absl::FailedPreconditionError(absl::StrCat("block ", p.value, " is still owned by ", heap::owner_of(word)));
    }
  }
  return absl::OkStatus();
}

void LeaseService::return_blocks(const PageIndex* blocks, uint32_t n) {
  const heap::Region& r = pages_->region();
  for (uint32_t i = 0; i < n; ++i) {
    PageIndex p = blocks[i];
    heap::crash_point("lease.give_back");  // part of a batch applied
    heap::BlockDesc& b = r.block(p);
    b.owner_word.store(0, std::memory_order_release);
    drop(p.value);
    // What the block is, the page heap decides (its descriptor's copy was
    // the client's to write): repair and the page heap go by this.
    // Written only where they differ: others read them without a lock.
    heap::PageDesc d = r.page(p);
    heap::PageCount length{d.kind == PageKind::kLarge ? r.header->params.large_block_pages
                                                      : pages_->classes().info(d.cls).block_pages};
    if (b.kind != d.kind) b.kind = d.kind;
    if (b.cls != d.cls) b.cls = d.cls;
    if (b.pages != length) b.pages = length;
    // Trust nothing the client says about the contents: count them.
    uint64_t leaked = 0;
    bool empty = heap::block_repair(r, pages_->classes(), p, &leaked);
    r.header->leaked_objects += leaked;
    if (empty) pages_->release(p);
    else pages_->abandon(p);
  }
}

absl::Status LeaseService::give_back(uint32_t client, const PageIndex* blocks, uint32_t n) {
  std::lock_guard<std::mutex> g(mu_);
  if (absl::Status s = check_client(client); !s.ok()) return s;
  if (absl::Status s = check_batch(client, blocks, n, false); !s.ok()) return s;
  return_blocks(blocks, n);
  return absl::OkStatus();
}

absl::Status LeaseService::take_back(uint32_t client, const PageIndex* blocks, uint32_t n) {
  std::lock_guard<std::mutex> g(mu_);
  if (absl::Status s = check_client(client); !s.ok()) return s;
  // The first block of a grant is owned by the asking thread heap: it never
  // saw it, so it is taken back owned.
  if (absl::Status s = check_batch(client, blocks, n, true); !s.ok()) return s;
  return_blocks(blocks, n);
  return absl::OkStatus();
}

uint32_t LeaseService::give_back_held(uint32_t client, const PageIndex* blocks, uint32_t n) {
  std::lock_guard<std::mutex> g(mu_);
  if (!check_client(client).ok()) return 0;
  std::vector<PageIndex> still;
  for (uint32_t i = 0; i < n && i < kMaxReleaseBatch; ++i) {
    if (std::find(still.begin(), still.end(), blocks[i]) != still.end()) continue;
    if (check_batch(client, &blocks[i], 1, false).ok()) still.push_back(blocks[i]);
  }
  return_blocks(still.data(), static_cast<uint32_t>(still.size()));
  return static_cast<uint32_t>(still.size());
}

absl::StatusOr<AcquiredBlock> LeaseService::acquire_huge(uint32_t client, heap::PageCount pages,
                                                         heap::PageCount align) {
  std::lock_guard<std::mutex> g(mu_);
  if (absl::Status s = check_client(client); !s.ok()) return s;
  if (pages.value == 0 || align.value == 0 || (align.value & (align.value - 1)) != 0) {
    return absl::InvalidArgumentError("huge run of 0 pages or an alignment not a power of two");
  }
  AcquiredBlock b = pages_->acquire_huge(pages, align);
  if (b.first == heap::kNoPage) return no_memory();
  runs_[b.first.value] = pages.value;
  return b;
}

namespace {
absl::Status check_huge(const heap::Region& r, PageIndex first) {
  uint32_t committed = r.committed_pages();
  if (first.value >= committed || r.page(first).kind != PageKind::kHuge || r.page(first).block != first.value) {
    return absl::InvalidArgumentError(absl::StrCat("page ", first.value, " does not start a huge object"));
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status LeaseService::check_claimed(uint32_t client, PageIndex first) const {
  // Any process may free or resize any object, so a huge run is not leased
  // to one client; the one that frees or resizes it claims it first (its
  // owner word names the claiming thread heap). A live run is unclaimed: a
  // request naming it, or naming a run another process claimed (a retry
  // after the run was freed and leased again, a lie), changes nothing.
  uint32_t word = pages_->region().block(first).owner_word.load(std::memory_order_acquire);
  if (word == 0) {
    return absl::FailedPreconditionError(absl::StrCat("huge object at page ", first.value,
                                                      " is live: it is not claimed for a free or resize"));
  }
  if (!holds_slot(client, heap::owner_of(word))) {
    return absl::PermissionDeniedError(absl::StrCat("huge object at page ", first.value, " is claimed by owner ",
                                                    heap::owner_of(word), ", not by lease slot ", client));
  }
  return absl::OkStatus();
}

absl::Status LeaseService::restore_run(PageIndex first) {
  auto run = runs_.find(first.value);
  if (run == runs_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("page ", first.value, " does not start a huge object"));
  }
  heap::BlockDesc& b = pages_->region().block(first);
  if (b.pages.value != run->second) b.pages = heap::PageCount{run->second};  // only then: read without a lock
  return absl::OkStatus();
}

absl::Status LeaseService::release_huge(uint32_t client, PageIndex first) {
  std::lock_guard<std::mutex> g(mu_);
  if (absl::Status s = check_client(client); !s.ok()) return s;
  if (absl::Status s = check_huge(pages_->region(), first); !s.ok()) return s;
  if (absl::Status s = check_claimed(client, first); !s.ok()) return s;
  if (absl::Status s = restore_run(first); !s.ok()) return s;
  heap::crash_point("lease.release_run");
  runs_.erase(first.value);
  pages_->release_huge(first);
  return absl::OkStatus();
}

absl::Status LeaseService::take_back_run(uint32_t client, PageIndex first) {
  std::lock_guard<std::mutex> g(mu_);
  if (absl::Status s = check_client(client); !s.ok()) return s;
  if (absl::Status s = check_huge(pages_->region(), first); !s.ok()) return s;
  // Never delivered, so never claimed; claimed means someone has it (a
  // client that got the answer after all and frees it) and it stays.
  if (pages_->region().block(first).owner_word.load(std::memory_order_acquire) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("huge object at page ", first.value, " is claimed: in use"));
  }
  if (absl::Status s = restore_run(first); !s.ok()) return s;
  runs_.erase(first.value);
  pages_->release_huge(first);
  return absl::OkStatus();
}

absl::StatusOr<bool> LeaseService::resize_huge(uint32_t client, PageIndex first, heap::PageCount want,
                                                bool* zeroed) {
  std::lock_guard<std::mutex> g(mu_);
  if (absl::Status s = check_client(client); !s.ok()) return s;
  if (absl::Status s = check_huge(pages_->region(), first); !s.ok()) return s;
  if (absl::Status s = check_claimed(client, first); !s.ok()) return s;
  if (want.value == 0) return absl::InvalidArgumentError("resize to 0 pages");
  if (absl::Status s = restore_run(first); !s.ok()) return s;
  bool resized = pages_->resize_huge(first, want, zeroed);
  if (resized) runs_[first.value] = want.value;
  return resized;
}

void LeaseService::client_gone(uint32_t client) {
  std::lock_guard<std::mutex> g(mu_);
  const heap::Region& r = pages_->region();
  if (client >= r.max_clients) return;
  LeaseSlot& l = r.leases[client];
  if (l.state.load(std::memory_order_acquire) != LeaseState::kActive) return;
  l.state.store(LeaseState::kReclaiming, std::memory_order_release);
  if (before_reclaim_) before_reclaim_(client + 1);
  uint64_t leaked = 0;
  // Blocks the client had disowned but not given back yet (in flight at its
  // death) are ownerless and on no list: nobody else can have them, so they
  // are taken back with the rest. Blocks its owner slots still own are
  // reclaim_holder's.
  std::vector<PageIndex> keep;
  for (auto it = ledger_.begin(); it != ledger_.end();) {
    auto here = it++;
    if (here->second != client) continue;
    PageIndex p{here->first};
    drop(p.value);
    if (!starts_block(p) || r.block(p).owner_word.load(std::memory_order_acquire) != 0) continue;
    if (heap::block_repair(r, pages_->classes(), p, &leaked)) pages_->release(p);
    else keep.push_back(p);
  }
  heap::crash_point("lease.reclaim");  // in-flight blocks taken back, owned ones not yet
  pages_->lock();
  heap::reclaim_holder(r, pages_->classes(), client + 1, now_ms(), [&](PageIndex b) { keep.push_back(b); },
                       &leaked);
  pages_->unlock();
  for (PageIndex b : keep) pages_->abandon(b);
  r.header->leaked_objects += leaked;
  l.pid = 0;
  l.state.store(LeaseState::kFree, std::memory_order_release);
}

void LeaseService::rebuild_ledger() {
  std::lock_guard<std::mutex> g(mu_);
  const heap::Region& r = pages_->region();
  ledger_.clear();
  runs_.clear();
  for (uint32_t c = 0; c < r.max_clients; ++c) set_held(c, 0);
  walk_runs([&](PageIndex p, uint32_t n, bool block) {
    // Huge runs as recovery (which has just run) found them.
    if (!block && r.page(p).kind == PageKind::kHuge && n == r.block(p).pages.value && r.page(p).block == p.value &&
        r.page(p + heap::PageCount{n - 1}).block == p.value) {
      runs_[p.value] = n;
    }
    uint32_t holder = block ? owning_holder(p) : 0;
    if (holder != 0 && r.leases[holder - 1].state.load(std::memory_order_acquire) == LeaseState::kActive) {
      hold(p.value, holder - 1);
    }
    return true;
  });
}

bool LeaseService::holds(uint32_t client, const PageIndex* blocks, uint32_t n) const {
  std::lock_guard<std::mutex> g(mu_);
  return check_client(client).ok() && check_batch(client, blocks, n, true).ok();
}

bool LeaseService::has_run(PageIndex first) const {
  std::lock_guard<std::mutex> g(mu_);
  return runs_.contains(first.value) && check_huge(pages_->region(), first).ok();
}

uint64_t LeaseService::blocks_held(uint32_t client) const {
  std::lock_guard<std::mutex> g(mu_);
  return client < held_.size() ? held_[client] : 0;
}

bool LeaseService::check(char* message, size_t message_size) const {
  std::lock_guard<std::mutex> g(mu_);
  const heap::Region& r = pages_->region();
  auto fail = [&](uint32_t page, const char* why) {
    if (message_size > 0) std::snprintf(message, message_size, "page %u: %s", page, why);
    return false;
  };
  uint32_t committed = r.committed_pages();
  std::vector<uint8_t> listed(committed, 0);
  pages_->lock();
  for (uint32_t list = 0; list < PageHeapOwner::kAbandonedLists; ++list) {
    PageIndex p = pages_->abandoned_head(list);
    for (uint32_t steps = 0; p != heap::kNoPage; ++steps) {
      if (steps >= committed || p.value >= committed) {
        pages_->unlock();
        return fail(p.value, "abandoned list runs out of the region or round a cycle");
      }
      if (listed[p.value]) {
        pages_->unlock();
        return fail(p.value, "block on the abandoned lists twice");
      }
      listed[p.value] = 1;
      if (!starts_block(p)) {
        pages_->unlock();
        return fail(p.value, "abandoned list names a page that does not start a block");
      }
      if (r.block(p).owner_word.load(std::memory_order_acquire) != 0) {
        pages_->unlock();
        return fail(p.value, "abandoned block has an owner");
      }
      p = r.block(p).next;
    }
  }
  pages_->unlock();
  std::vector<uint64_t> counts(r.max_clients, 0);
  for (const auto& [block, client] : ledger_) {
    PageIndex p{block};
    if (!starts_block(p)) return fail(block, "leased block no longer starts a block");
    if (client >= r.max_clients || r.leases[client].state.load(std::memory_order_acquire) != LeaseState::kActive) {
      return fail(block, "block leased to a lease slot that is not active");
    }
    if (listed[block]) return fail(block, "block both leased and abandoned");
    heap::OwnerId owner = heap::owner_of(r.block(p).owner_word.load(std::memory_order_acquire));
    if (owner != heap::kNoOwner && heap::slot_of(owner) < r.max_owners &&
        r.slots[heap::slot_of(owner)].in_use.load(std::memory_order_acquire) != client + 1) {
      return fail(block, "block leased to one client and owned by another's thread heap");
    }
    ++counts[client];
  }
  // The other way round: a block a client's thread heap or stash owns was
  // leased to that client, or two processes may be allocating in it.
  uint32_t stray = 0;
  bool consistent = walk_runs([&](PageIndex p, uint32_t, bool block) {
    uint32_t holder = block ? owning_holder(p) : 0;
    if (holder == 0) return true;
    auto held = ledger_.find(p.value);
    stray = p.value;
    return held != ledger_.end() && held->second == holder - 1;
  });
  if (!consistent) return fail(stray, "block owned by a client's thread heap but not leased to that client");
  for (uint32_t c = 0; c < r.max_clients; ++c) {
    if (r.leases[c].state.load(std::memory_order_acquire) != LeaseState::kActive) continue;
    if (r.leases[c].blocks.load(std::memory_order_relaxed) != counts[c]) {
      if (message_size > 0) {
        std::snprintf(message, message_size, "lease slot %u: counts %llu blocks, holds %llu", c,
                      static_cast<unsigned long long>(r.leases[c].blocks.load()),
                      static_cast<unsigned long long>(counts[c]));
      }
      return false;
    }
  }
  return true;
}

}  // namespace memd::region
