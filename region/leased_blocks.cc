#include "region/leased_blocks.h"

#include <algorithm>
#include <cerrno>
#include <ctime>

#include "heap/remote_free.h"

namespace memd::region {

using heap::AcquiredBlock;
using heap::PageIndex;

namespace {

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

void LeasedBlocks::init(const heap::Region& r, LeaseChannel* channel, const ClientLease& lease) {
  region_ = r;
  channel_ = channel;
  lease_ = lease;
  last_trim_ns_ = monotonic_ns();
  heap::SizeClasses classes(r.header->params);
  for (uint32_t list = 0; list < kLists; ++list) {
    bool large = list == kLists - 1;
    if (!large && (list < classes.first_class() || list > classes.last_class())) continue;
    uint32_t pages = large ? r.header->params.large_block_pages : classes.info(list).block_pages;
    Stash& s = stash_[list];
    s.block_pages = std::max<uint32_t>(pages, 1);
    s.max_batch = std::clamp<uint32_t>(kLeasePages / s.block_pages, 1, kMaxLeaseBatch);
    s.batch = std::min(s.batch, s.max_batch);
    s.flush_at = std::clamp<uint32_t>(kClassSparePages / s.block_pages, kMinSpareEntries, kStashCapacity);
  }
}

void LeasedBlocks::take_oldest_locked(Stash& s, uint32_t n, PageIndex* out, uint32_t* out_n) {
  n = std::min({n, s.count, kGiveBackMax - *out_n});
  if (n == 0) return;
  std::copy(s.blocks, s.blocks + n, out + *out_n);
  *out_n += n;
  std::copy(s.blocks + n, s.blocks + s.count, s.blocks);
  std::copy(s.zeroed + n, s.zeroed + s.count, s.zeroed);
  s.count -= n;
  s.low_water = std::min(s.low_water, s.count);
  spare_pages_ -= uint64_t{n} * s.block_pages;
}

void LeasedBlocks::trim_locked(uint64_t now, bool force, PageIndex* out, uint32_t* out_n) {
  if (!force && now - last_trim_ns_ < kTrimIntervalNs) return;
  last_trim_ns_ = now;
  for (Stash& s : stash_) {
    // The oldest low_water spares sat unused the whole interval.
    take_oldest_locked(s, s.low_water, out, out_n);
    s.low_water = s.count;
  }
}

void LeasedBlocks::give_back_unlocked(const PageIndex* blocks, uint32_t n) {
  if (n > 0) (void)channel_->give_back(blocks, n);
}

AcquiredBlock LeasedBlocks::acquire(heap::PageKind kind, uint16_t cls, heap::OwnerId owner) {
  Stash& s = stash_[list_of(kind, cls)];
  pthread_mutex_lock(&lock_);
  in_use_pages_ += s.block_pages;
  if (s.count == 0) {
    // A round trip anyway: first let the owner list what we gave up, so
    // that this very lease may adopt it, and give back what sat idle.
    flush_abandoned_locked();
    PageIndex idle[kGiveBackMax];
    uint32_t idle_n = 0;
    trim_locked(monotonic_ns(), false, idle, &idle_n);
    AcquiredBlock got[kMaxLeaseBatch];
    absl::StatusOr<uint32_t> n = channel_->lease(kind, cls, owner, s.batch, got);
    if (!n.ok() || *n == 0) {
      in_use_pages_ -= s.block_pages;
      pthread_mutex_unlock(&lock_);
      give_back_unlocked(idle, idle_n);
      errno = ENOMEM;
      return {};
    }
    s.batch = std::min(s.batch * 2, s.max_batch);
    // The first is the caller's (owned by `owner` already); the rest, owned
    // by the stash, wait here (newest last: the lowest pages go out first).
    for (uint32_t i = *n; i-- > 1;) {
      s.blocks[s.count] = got[i].first;
      s.zeroed[s.count] = got[i].zeroed;
      ++s.count;
    }
    spare_pages_ += uint64_t{*n - 1} * s.block_pages;
    pthread_mutex_unlock(&lock_);
    give_back_unlocked(idle, idle_n);
    return got[0];
  }
  --s.count;
  s.low_water = std::min(s.low_water, s.count);
  spare_pages_ -= s.block_pages;
  AcquiredBlock b{s.blocks[s.count], s.zeroed[s.count], false};
  pthread_mutex_unlock(&lock_);
  heap::set_owner(region_.block(b.first), owner);
  return b;
}

void LeasedBlocks::release(PageIndex block) {
  heap::BlockDesc& b = region_.block(block);
  Stash& s = stash_[list_of(b.kind, b.cls)];
  // Keep it: the next block of this class costs no round trip. It is
  // disowned (by the thread heap); the stash takes it.
  heap::set_owner(b, lease_.stash);
  PageIndex out[kGiveBackMax];
  uint32_t n = 0;
  pthread_mutex_lock(&lock_);
  in_use_pages_ -= std::min<uint64_t>(in_use_pages_, s.block_pages);
  // Full only if a trim filled the give-back buffer before this class's
  // half could go (flush_at <= capacity otherwise keeps it below).
  if (s.count == kStashCapacity) take_oldest_locked(s, 1, out, &n);
  s.blocks[s.count] = block;
  s.zeroed[s.count] = false;
  ++s.count;
  spare_pages_ += s.block_pages;
  uint64_t total_cap = std::max<uint64_t>(kTotalSparePagesFloor, in_use_pages_ >> kTotalSpareShift);
  if (s.count >= s.flush_at || spare_pages_ > total_cap) {
    // Too many spares: the idle ones of every class go back, and if that
    // is not enough the oldest half of this class (the newest, most likely
    // still in cache, stay); the class leases less next time.
    trim_locked(monotonic_ns(), true, out, &n);
    if (s.count >= s.flush_at || spare_pages_ > total_cap) {
      take_oldest_locked(s, std::max<uint32_t>(1, s.count / 2), out, &n);
      s.batch = std::min<uint32_t>(2, s.max_batch);
    }
  } else {
    trim_locked(monotonic_ns(), false, out, &n);
  }
  pthread_mutex_unlock(&lock_);
  give_back_unlocked(out, n);
}

void LeasedBlocks::abandon(PageIndex block) {
  heap::BlockDesc& b = region_.block(block);
  const uint32_t pages = stash_[list_of(b.kind, b.cls)].block_pages;
  heap::set_owner(b, lease_.stash);
  pthread_mutex_lock(&lock_);
  in_use_pages_ -= std::min<uint64_t>(in_use_pages_, pages);
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
    s.low_water = 0;
  }
  spare_pages_ = 0;
  pthread_mutex_unlock(&lock_);
}

}  // namespace memd::region
