#include "client/leased_blocks.h"

#include <algorithm>
#include <cerrno>

#include "heap/remote_free.h"

namespace memd::client {

using heap::AcquiredBlock;
using heap::PageIndex;

void LeasedBlocks::init(const heap::Region& r, LeaseChannel* channel, const ClientLease& lease) {
  region_ = r;
  channel_ = channel;
  lease_ = lease;
  heap::SizeClasses classes(r.header->params);
  for (uint32_t list = 0; list < kLists; ++list) {
    bool large = list == kLists - 1;
    if (!large && (list < classes.first_class() || list > classes.last_class())) continue;
    uint32_t pages = large ? r.header->params.large_block_pages : classes.info(list).block_pages;
    if (pages <= kCountedBlockPages) continue;
    Stash& s = stash_[list];
    s.max_batch = std::clamp<uint32_t>(kLeasePages / pages, 1, kMaxLeaseBatch);
    s.batch = std::min(s.batch, s.max_batch);
    s.flush_at = std::clamp<uint32_t>(kSparePages / pages, 2, kStashMax + kReleaseBatch);
    s.release_batch = std::max<uint32_t>(1, s.flush_at * 2 / 3);
  }
}

AcquiredBlock LeasedBlocks::acquire(heap::PageKind kind, uint16_t cls, heap::OwnerId owner) {
  Stash& s = stash_[list_of(kind, cls)];
  pthread_mutex_lock(&lock_);
  if (s.count == 0) {
    // A round trip anyway: first let the owner list what we gave up, so
    // that this very lease may adopt it.
    flush_abandoned_locked();
    AcquiredBlock got[kMaxLeaseBatch];
    absl::StatusOr<uint32_t> n = channel_->lease(kind, cls, owner, s.batch, got);
    if (!n.ok() || *n == 0) {
      pthread_mutex_unlock(&lock_);
      errno = ENOMEM;
      return {};
    }
    s.batch = std::min(s.batch * 2, s.max_batch);
    // The first is the caller's (owned by `owner` already); the rest, owned
    // by the stash, wait here.
    for (uint32_t i = *n; i-- > 1;) {
      s.blocks[s.count] = got[i].first;
      s.zeroed[s.count] = got[i].zeroed;
      ++s.count;
    }
    pthread_mutex_unlock(&lock_);
    return got[0];
  }
  --s.count;
  AcquiredBlock b{s.blocks[s.count], s.zeroed[s.count], false};
  pthread_mutex_unlock(&lock_);
  heap::set_owner(region_.block(b.first), owner);
  return b;
}

void LeasedBlocks::release(PageIndex block) {
  heap::BlockDesc& b = region_.block(block);
  uint32_t list = list_of(b.kind, b.cls);
  Stash& s = stash_[list];
  // Keep it: the next block of this class costs no round trip. It is
  // disowned (by the thread heap); the stash takes it.
  heap::set_owner(b, lease_.stash);
  pthread_mutex_lock(&lock_);
  s.blocks[s.count] = block;
  s.zeroed[s.count] = false;
  ++s.count;
  if (s.count < s.flush_at) {
    pthread_mutex_unlock(&lock_);
    return;
  }
  // Too many spares: the oldest go back in one call (the newest, most
  // likely still in cache, stay), and this class leases less next time.
  const uint32_t n = s.release_batch;
  PageIndex out[kReleaseBatch];
  std::copy(s.blocks, s.blocks + n, out);
  std::copy(s.blocks + n, s.blocks + s.count, s.blocks);
  std::copy(s.zeroed + n, s.zeroed + s.count, s.zeroed);
  s.count -= n;
  s.batch = std::min<uint32_t>(2, s.max_batch);
  pthread_mutex_unlock(&lock_);
  (void)channel_->give_back(out, n);
}

void LeasedBlocks::abandon(PageIndex block) {
  heap::set_owner(region_.block(block), lease_.stash);
  pthread_mutex_lock(&lock_);
  abandoned_[abandoned_count_++] = block;
  if (abandoned_count_ == kMaxLeaseBatch) flush_abandoned_locked();
  pthread_mutex_unlock(&lock_);
}

void LeasedBlocks::flush_abandoned_locked() {
  if (abandoned_count_ == 0) return;
  (void)channel_->give_back(abandoned_, abandoned_count_);
  abandoned_count_ = 0;
}

AcquiredBlock LeasedBlocks::acquire_huge(heap::PageCount pages, heap::PageCount align) {
  absl::StatusOr<AcquiredBlock> b = channel_->acquire_huge(pages, align);
  if (!b.ok()) {
    errno = ENOMEM;
    return {};
  }
  return *b;
}

void LeasedBlocks::release_huge(PageIndex first) { (void)channel_->release_huge(first); }

bool LeasedBlocks::resize_huge(PageIndex first, heap::PageCount want, bool* zeroed) {
  absl::StatusOr<bool> ok = channel_->resize_huge(first, want, zeroed);
  return ok.ok() && *ok;
}

void LeasedBlocks::return_all() {
  pthread_mutex_lock(&lock_);
  flush_abandoned_locked();
  for (Stash& s : stash_) {
    if (s.count == 0) continue;
    (void)channel_->give_back(s.blocks, s.count);
    s.count = 0;
  }
  pthread_mutex_unlock(&lock_);
}

}  // namespace memd::client
