#include "heap/thread_heap.h"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace memd::heap {
namespace {

// The largest object a page run can describe; beyond, pages_for would wrap.
constexpr size_t kMaxHugeBytes = size_t{UINT32_MAX - 1} << kPageShift;

// The current block of a class with no block yet: always "full", so the
// first allocation takes the slow path. Never written.
BlockDesc empty_block{};

}  // namespace

BlockDesc* ThreadHeap::empty_sentinel() { return &empty_block; }

void ThreadHeap::init(const Region& r, const SizeClasses* classes, BlockSource* source, OwnerId id) {
  region_ = r;
  sample_draws_.rng = (uint64_t{id} << 32) ^ reinterpret_cast<uintptr_t>(this) ^ static_cast<uint64_t>(clock());
  sample_countdown_ = start_sample_countdown(sampling_period(), &sample_draws_);
  data_ = r.data;
  data_bytes_ = r.data_bytes;
  for (void*& p : last_grouped_) p = nullptr;
  page_descs_ = r.page_descs;
  blocks_ = r.blocks;
  medium_max_ = classes->medium_max();
  large_max_ = classes->large_max();
  classes_ = classes;
  source_ = source;
  id_ = id;
  claim_id_ = id;
  my_slot_ = &r.slots[slot_of(id)];
  for (RemoteBatch& rb : remote_batches_) rb = RemoteBatch{};
  remote_batched_[0] = remote_batched_[1] = 0;
  huge_cache_ = HugeCache{};
  huge_cache_slots_ = std::clamp<uint32_t>(source->huge_runs_kept(), 1, kHugeCacheSlots);
  huge_cache_allowed_ = true;
  parked_ = ParkedBlocks{};
  parking_allowed_ = source->parks_empty_blocks();
  secret_ = r.secret;
  empty_blocks_per_class_ = r.header->params.empty_blocks_per_class;
  kept_empty_large_ = kNoPage;
  idle_big_[0] = idle_big_[1] = 0;
  first_big_class_ = classes->last_class() + 1;
  for (uint32_t cls = classes->last_class(); cls >= classes->first_class() && cls > 0; --cls) {
    if (classes->info(cls).block_pages < kBigBlockPages) break;
    first_big_class_ = cls;
  }
  chain_groups_ready_ = 0;  // a group's lists are made again at its first use
  for (uint32_t cls = 0; cls < kMaxSegregatedClasses; ++cls) {
    ClassList& cl = lists_[cls];
    cl.cur = &empty_block;
    cl.cur_base = nullptr;
    cl.size = SizeClasses::size_of_class(cls);
    bool valid = cls >= classes->first_class() && cls <= classes->last_class();
    cl.end = valid ? classes->info(cls).end : 0;
    cl.reciprocal = valid ? classes->info(cls).reciprocal : 0;
    cl.avail = cl.full = BlockList{};
    cl.empty_kept = 0;
    const uint32_t capacity = valid ? cl.end / cl.size : 1;
    free_floor_[cls][0] = 1;
    free_floor_[cls][kBlockFull] = capacity - std::max<uint32_t>(1, capacity / kUnfullFraction) + 1;
  }
  large_.init(r, r.header->params.large_max, r.header->params.large_block_pages, secret_);
}

void ThreadHeap::add_counters(CounterSnapshot* out) const {
  for (uint32_t cls = 0; cls < kMaxSegregatedClasses; ++cls) add_class_counts(out, cls, lists_[cls].counts);
  add_heap_counts(out, counters_);
}

// --- owner lists (BlockDesc::prev/next) ---

void ThreadHeap::list_push_front(BlockList* list, PageIndex p) {
  BlockDesc& b = region_.block(p);
  b.prev = kNoPage;
  b.next = list->head;
  if (list->head != kNoPage) region_.block(list->head).prev = p;
  else list->tail = p;
  list->head = p;
}

void ThreadHeap::list_push_back(BlockList* list, PageIndex p) {
  BlockDesc& b = region_.block(p);
  b.next = kNoPage;
  b.prev = list->tail;
  if (list->tail != kNoPage) region_.block(list->tail).next = p;
  else list->head = p;
  list->tail = p;
}

void ThreadHeap::list_remove(BlockList* list, PageIndex p) {
  BlockDesc& b = region_.block(p);
  if (b.prev != kNoPage) region_.block(b.prev).next = b.next;
  else list->head = b.next;
  if (b.next != kNoPage) region_.block(b.next).prev = b.prev;
  else list->tail = b.prev;
  b.prev = b.next = kNoPage;
}

// A full block has room again. Unlike Vam, which puts it at the front of the
// available list, it goes to the back: the current block is used up first,
// and by the time the block comes up it has gathered more free objects. Under
// random frees, front insertion made nearly every allocation a slow path.
void ThreadHeap::unfull(ClassList& cl, PageIndex p) {
  region_.block(p).flags &= ~kBlockFull;
  list_remove(&cl.full, p);
  list_push_back(&cl.avail, p);
  if (cl.cur == &empty_block) refresh_cur(cl);
}

void ThreadHeap::refresh_cur(ClassList& cl) {
  BlockDesc* old = cl.cur;
  if (cl.avail.head == kNoPage) {
    cl.cur = &empty_block;
    cl.cur_base = nullptr;
  } else {
    BlockDesc& b = region_.block(cl.avail.head);
    if (b.flags & kBlockCached) {
      b.flags &= ~kBlockCached;
      --cl.empty_kept;
    }
    cl.cur = &b;
    cl.cur_base = region_.page_address(cl.avail.head);
  }
  // The current block is kept even when empty; once another block takes its
  // place (a full block freed into moves to the front), it is empty like any.
  if (old != cl.cur && old != &empty_block && old->used == 0 && !(old->flags & kBlockFull)) {
    handle_empty(cl, *old);
  }
}

// --- allocation ---

void* ThreadHeap::alloc_slow(uint32_t cls) {
  ClassList& cl = lists_[cls];
  // A fresh block's bump space first; the remote frees others told us of
  // wait until it runs out. Short, with the rest in another function: a
  // block's bump allocations (every object of a fresh block) pay for no
  // saved registers.
  if (char* p = block_pop(*cl.cur, cl.cur_base, cl.size)) {
    count_one(cl.counts.allocs);
    return p;
  }
  return alloc_refill(cls);
}

void* ThreadHeap::alloc_refill(uint32_t cls) { return refill_list(lists_[cls], cls, 0); }

void* ThreadHeap::refill_list(ClassList& cl, uint32_t cls, uint8_t group) {
  // The thread works its slow path: the frees it gathered go out too.
  flush_remote_frees();
  take_pending();
  const ClassInfo& info = classes_->info(cls);
  for (;;) {
    if (cl.cur != &empty_block) {
      BlockDesc& b = *cl.cur;
      if (char* p = block_pop(b, cl.cur_base, cl.size)) {
        count_one(lists_[cls].counts.allocs);  // a group's allocations count in the class's
        return p;
      }
      if (b.remote.load(std::memory_order_relaxed) != 0 &&
          block_collect_remote(b, cl.cur_base) > 0) {
        continue;
      }
      // No room left: the block waits on the full list for frees.
      PageIndex p = region_.index_of(b);
      list_remove(&cl.avail, p);
      b.flags |= kBlockFull;
      list_push_front(&cl.full, p);
      refresh_cur(cl);
      continue;
    }
    retire_idle_big_blocks();
    bool intact = false;
    PageIndex parked = unpark_block(PageCount{info.block_pages}, static_cast<uint16_t>(cls), &intact);
    AcquiredBlock got = parked != kNoPage ? AcquiredBlock{parked, false, false}
                                          : source_->acquire(PageKind::kSegregated, static_cast<uint16_t>(cls), id_);
    if (got.first == kNoPage) return nullptr;
    BlockDesc& b = region_.block(got.first);
    if (intact) {
      // Its free list serves as it is (unpark_block).
    } else if (got.adopted) {
      block_collect_remote(b, region_.page_address(got.first));
      b.flags &= ~(kBlockFull | kBlockCached);
    } else {
      block_init(b, static_cast<uint16_t>(cls), info.end, got.zeroed);
    }
    b.chain_group = group;  // an adopted block may carry another owner's
    list_push_front(&cl.avail, got.first);
    refresh_cur(cl);
  }
}

void ThreadHeap::retire_idle_big_blocks() {
  static_assert(kMaxSegregatedClasses <= 128);
  uint64_t idle[2] = {0, 0};
  for (uint32_t cls = first_big_class_; cls <= classes_->last_class(); ++cls) {
    ClassList& cl = lists_[cls];
    BlockDesc& b = *cl.cur;
    if (&b == &empty_block || b.used != 0) continue;
    uint64_t bit = uint64_t{1} << (cls % 64);
    if (!(idle_big_[cls / 64] & bit)) {
      idle[cls / 64] |= bit;  // empty now: given back if still empty next time
      continue;
    }
    // Still empty: the class is idle. Its current block and the empty one
    // it keeps aside go back (the lookaside, else the page heap); another
    // available block, if any, becomes current.
    cl.cur = &empty_block;
    cl.cur_base = nullptr;
    for (PageIndex p = cl.avail.head; p != kNoPage;) {
      BlockDesc& e = region_.block(p);
      p = e.next;
      if (&e != &b && !(e.flags & kBlockCached)) continue;
      if (e.flags & kBlockCached) {
        e.flags &= ~kBlockCached;
        --cl.empty_kept;
      }
      (void)give_back_empty(cl, e);  // kept (a notification in flight): stays available
    }
    refresh_cur(cl);
  }
  idle_big_[0] = idle[0];
  idle_big_[1] = idle[1];
}

bool ThreadHeap::sample_due(size_t size) {
  CountdownEnd end = end_sample_countdown(sampling_period(), size, &sample_draws_);
  sample_countdown_ = end.next;
  return end.sample;
}

void* ThreadHeap::alloc_sampled(size_t size, size_t align, bool* zeroed) {
  return sample_due(size) ? alloc_sample(size, align, zeroed) : alloc_unsampled(size, align, zeroed);
}

void* ThreadHeap::alloc_sample(size_t size, size_t align, bool* zeroed) {
  const SamplingHooks* hooks = sampling_hooks();
  bool small = size <= medium_max_;
  if (hooks == nullptr || size == 0 || size > kMaxHugeBytes || (small && align > kPageSize)) {
    return alloc_unsampled(size, align, zeroed);  // not a sample after all: as it would have gone
  }
  size_t counted_bytes;
  void* p;
  if (small) {
    // A chunk of its own in a large block: free finds it on the large path.
    bool fresh = false;
    take_pending();
    p = large_.alloc(*source_, id_, size, std::max<size_t>(align, kChunkAlign), &fresh);
    if (p == nullptr) return alloc_unsampled(size, align, zeroed);
    if (locate(p).block == kept_empty_large_) kept_empty_large_ = kNoPage;
    if (zeroed) *zeroed = fresh;
    uint32_t cls = SizeClasses::class_of(size);
    counted_bytes = lists_[cls].size;
    count_one(lists_[cls].counts.allocs);
    LargeHeap::mark_sampled(p, cls);
  } else {
    p = alloc_big(size, align, zeroed);
    if (p == nullptr) return nullptr;
    PointerInfo at = locate(p);
    if (at.kind == PageKind::kLarge) {
      LargeHeap::mark_sampled(p, kSampledAsLarge);
      counted_bytes = LargeHeap::usable_size(p);
    } else {
      BlockDesc& run = region_.block(at.block);
      run.flags |= kBlockSampled;
      counted_bytes = run.pages.bytes();
    }
  }
  count_one(counters_.samples);
  hooks->allocated(region_, p, size, counted_bytes);
  return p;
}

void* ThreadHeap::alloc_big(size_t size, size_t align, bool* zeroed) {
  if (__builtin_expect(size <= large_max_ && align <= kPageSize, 1)) {
    // A chunk of this very size freed lately: no pending work needed first.
    if (void* q = align <= kChunkAlign ? large_.try_quick(size) : nullptr) {
      if (zeroed) *zeroed = false;
      count_one(counters_.large.allocs);
      count_add(counters_.large.alloc_bytes, LargeHeap::usable_size(q));
      return q;
    }
    return alloc_large(size, align, zeroed);
  }
  return alloc_huge(size, align, zeroed);
}

void* ThreadHeap::alloc_recoverable(size_t size) {
  if (size <= medium_max_ || size > large_max_) return alloc(size);
  return alloc_huge(size, kPageSize, nullptr);
}

void* ThreadHeap::alloc_large(size_t size, size_t align, bool* zeroed) {
  take_pending();
  bool fresh = false;
  void* p = large_.alloc(*source_, id_, size, align, &fresh);
  if (p == nullptr) return nullptr;
  if (locate(p).block == kept_empty_large_) kept_empty_large_ = kNoPage;
  if (zeroed) *zeroed = fresh;
  count_one(counters_.large.allocs);
  count_add(counters_.large.alloc_bytes, LargeHeap::usable_size(p));  // the header just written
  return p;
}

void* ThreadHeap::alloc_huge(size_t size, size_t align, bool* zeroed) {
  if (size > kMaxHugeBytes) {
    errno = ENOMEM;
    return nullptr;
  }
  PageCount pages = pages_for(size);
  PageCount align_pages{static_cast<uint32_t>(std::max<size_t>(align / kPageSize, 1))};
  PageIndex run = kNoPage;
  if (pages.value <= kHugeCachePages) {
    huge_cache_note_alloc(pages);
    // A run this thread freed, of this size or a little more: no lock, no
    // descriptor writes, no faults.
    run = huge_cache_take(pages, align_pages);
  } else {
    ++huge_cache_.clock;
  }
  // A miss of any size: kept runs stale by now go back first, so that the
  // page heap can place this request in them or beside them. Past only the
  // misses of cacheable sizes, runs piled up while bigger requests grew the
  // heap (wl_large_buffers, 64 KiB-4 MiB: peak RSS 1.27x glibc's).
  if (run == kNoPage && huge_cache_.count > 0) huge_cache_release_stale();
  if (run != kNoPage) {
    region_.block(run).owner_word.store(0, std::memory_order_relaxed);
    if (zeroed) *zeroed = false;
  } else {
    AcquiredBlock got = source_->acquire_huge(pages, align_pages);
    if (got.first == kNoPage) return nullptr;
    if (zeroed) *zeroed = got.zeroed;
    run = got.first;
    // The first page's descriptor may carry the flags of an earlier block
    // (a sampled huge run whose process died).
    region_.block(run).flags = 0;
  }
  count_one(counters_.huge.allocs);
  count_add(counters_.huge.alloc_bytes, region_.block(run).pages.bytes());
  return region_.page_address(run);
}

void ThreadHeap::huge_cache_note_alloc(PageCount pages) {
  HugeCache& c = huge_cache_;
  ++c.clock;
  c.window_pages += pages.value;
  if (++c.window_allocs < kHugeDemandWindow) return;
  c.demand_pages = c.window_pages;
  c.window_allocs = c.window_pages = 0;
}

PageIndex ThreadHeap::huge_cache_take(PageCount pages, PageCount align_pages) {
  HugeCache& c = huge_cache_;
  uint32_t best = c.count;
  uint32_t best_pages = pages.value + pages.value / 4 + 1;
  for (uint32_t i = 0; i < c.count; ++i) {
    uint32_t have = region_.block(c.runs[i]).pages.value;
    if (have >= pages.value && have < best_pages && region_.page_number(c.runs[i]) % align_pages.value == 0) {
      best = i;
      best_pages = have;
    }
  }
  if (best == c.count) return kNoPage;
  PageIndex run = c.runs[best];
  for (uint32_t i = best + 1; i < c.count; ++i) {
    c.runs[i - 1] = c.runs[i];
    c.kept_at[i - 1] = c.kept_at[i];
  }
  --c.count;
  c.pages -= best_pages;
  return run;
}

void ThreadHeap::huge_cache_release_stale() {
  HugeCache& c = huge_cache_;
  uint32_t kept = 0;
  for (uint32_t i = 0; i < c.count; ++i) {
    if (c.clock - c.kept_at[i] > kHugeCacheMaxAge) {
      c.pages -= region_.block(c.runs[i]).pages.value;
      source_->release_huge(c.runs[i]);
    } else {
      c.runs[kept] = c.runs[i];
      c.kept_at[kept++] = c.kept_at[i];
    }
  }
  c.count = kept;
}

void ThreadHeap::huge_cache_put(PageIndex run) {
  HugeCache& c = huge_cache_;
  uint32_t pages = region_.block(run).pages.value;
  uint32_t cap = c.cap();
  // Oldest out first, until the run fits under the cap and in the slots.
  uint32_t drop = 0;
  uint32_t held = c.pages;
  while (drop < c.count && (c.count - drop >= huge_cache_slots_ || held + pages > cap)) {
    held -= region_.block(c.runs[drop]).pages.value;
    source_->release_huge(c.runs[drop++]);
  }
  for (uint32_t i = drop; i < c.count; ++i) {
    c.runs[i - drop] = c.runs[i];
    c.kept_at[i - drop] = c.kept_at[i];
  }
  c.count -= drop;
  c.kept_at[c.count] = c.clock;
  c.runs[c.count++] = run;
  c.pages = held + pages;
}

void* ThreadHeap::alloc_zeroed(size_t size) {
  if ((sample_countdown_ -= static_cast<int64_t>(size)) < 0) {
    bool fresh = false;
    void* p = alloc_sampled(size, 0, &fresh);
    if (p && !fresh) zero_new(p, size);
    return p;
  }
  if (size <= classes_->medium_max()) {
    uint32_t cls = SizeClasses::class_of(size);
    BlockDesc& b = *lists_[cls].cur;
    // The next object comes from fresh bump space if the free list is empty.
    bool fresh = b.free_head == 0 && (b.flags & kBlockFreshBump) && b.bump < b.end;
    void* p = alloc_segregated(cls);
    if (p && !fresh) std::memset(p, 0, size);
    return p;
  }
  bool fresh = false;
  void* p = alloc_big(size, 0, &fresh);
  if (p && !fresh) zero_new(p, size);
  return p;
}

void ThreadHeap::zero_new(void* p, size_t size) {
  // A reused huge run: zeros written into every page make the whole run
  // resident, though a program often touches little of a large zeroed
  // buffer (glibc's calloc of a fresh mapping writes nothing either).
  if (size >= kZeroByDiscardBytes) {
    PageIndex run{static_cast<uint32_t>((static_cast<char*>(p) - region_.data) >> kPageShift)};
    if (region_.page_address(run) == p && source_->zero_huge(run, pages_for(size))) return;
  }
  std::memset(p, 0, size);
}

void* ThreadHeap::alloc_aligned(size_t size, size_t align) {
  if (size > (SIZE_MAX >> 1) || align > (SIZE_MAX >> 2)) {  // rounding below must not wrap
    errno = ENOMEM;
    return nullptr;
  }
  static_assert(kObjectAlign == kChunkAlign, "every object is kChunkAlign aligned");
  if (align <= kChunkAlign) {
    return alloc(size);
  }
  if ((sample_countdown_ -= static_cast<int64_t>(size)) < 0) return alloc_sampled(size, align, nullptr);
  return alloc_unsampled(size, align, nullptr);
}

void* ThreadHeap::alloc_unsampled(size_t size, size_t align, bool* zeroed) {
  // A segregated class whose size is a multiple of the alignment places every
  // object aligned, since blocks start on page boundaries. Every class handed
  // out is a multiple of 16; a mid-size class of (5..8) << k bytes is a
  // multiple of any alignment up to 2^k, and a rounded size past that is
  // mostly a class size itself; the check is cheap.
  if (size <= medium_max_ && align <= kPageSize) {  // so the rounding cannot wrap
    size_t a = std::max<size_t>(align, kGranule);
    size_t rounded = (std::max(size, a) + a - 1) & ~(a - 1);
    if (rounded <= medium_max_) {
      uint32_t cls = SizeClasses::class_of(rounded);
      if (lists_[cls].size % a == 0) {
        if (zeroed) *zeroed = false;
        return alloc_segregated(cls);
      }
    }
  }
  return alloc_big(size, align, zeroed);
}

// --- free ---

FreeStatus ThreadHeap::free_slow(void* p, uint64_t page_desc) {
  PageDesc d = PageDesc::unpack(page_desc);
  if (d.kind == PageKind::kHuge) return free_huge_object(p, page_desc);
  if (d.kind != PageKind::kSegregated) return free_big(p, page_desc);
  SegregatedFree f = segregated_free(p, static_cast<Offset>(static_cast<char*>(p) - data_), d);
  if (!f.object_start()) return FreeStatus::kInvalid;
  if (load_tag(f.obj) == f.tag) return FreeStatus::kDoubleFree;
  BlockDesc& b = *f.block;
  if (owner_of(b.owner_word.load(std::memory_order_relaxed)) == id_) {
    count_one(f.cl->counts.frees);
    if (f.in_block >= b.bump) return FreeStatus::kInvalid;
    uint32_t used = block_push_local(b, f.obj, f.in_block, f.tag);
    // A full block regains room, or a block other than the current one empties.
    if ((b.flags & kBlockFull) ? used < unfull_below(b.cls) : (used == 0 && &b != f.cl->cur)) after_local_free(b);
    return FreeStatus::kOk;
  }
  return free_remote(f);  // kDoubleFree if it lost a race with another free
}

FreeStatus ThreadHeap::free_remote_other_block(ClassList* cl, BlockDesc* block, char* obj, uint32_t in_block) {
  if (!remote_batching_) {
    count_one(cl->counts.frees);
    if (remote_push(*block, obj, in_block)) notify_owner(region_, region_.index_of(*block));
    return FreeStatus::kOk;
  }
  const uint32_t cls = static_cast<uint32_t>(cl - lists_);
  RemoteBatch& rb = remote_batches_[cls];
  if (rb.count != 0) flush_remote_batch(rb);
  const uint32_t entry = in_block + 1;
  rb = RemoteBatch{block, entry, entry, 1, std::clamp<uint32_t>(kRemoteBatchBytes / cl->size, 1, kRemoteBatch)};
  remote_batched_[cls / 64] |= uint64_t{1} << (cls % 64);
  if (rb.limit == 1) flush_remote_batch(rb);  // objects too big to wait
  return FreeStatus::kOk;
}

void ThreadHeap::flush_remote_batch(RemoteBatch& rb) {
  const uint32_t cls = static_cast<uint32_t>(&rb - remote_batches_);
  remote_batched_[cls / 64] &= ~(uint64_t{1} << (cls % 64));
  count_add(lists_[cls].counts.frees, rb.count);
  PageIndex block = region_.index_of(*rb.block);
  char* tail_obj = region_.page_address(block) + rb.tail - 1;
  if (remote_push_chain(*rb.block, tail_obj, rb.head, rb.tail, rb.count)) notify_owner(region_, block);
  rb = RemoteBatch{};
}

void ThreadHeap::flush_remote_batches() {
  for (uint32_t word = 0; word < 2; ++word) {
    while (remote_batched_[word] != 0) {
      flush_remote_batch(remote_batches_[word * 64 + static_cast<uint32_t>(__builtin_ctzll(remote_batched_[word]))]);
    }
  }
}

void ThreadHeap::after_local_free(BlockDesc& b) {
  ClassList& cl = list_of(b);
  if (has_room_again(b)) unfull(cl, region_.index_of(b));
  if (b.used == 0) handle_empty(cl, b);
}

void ThreadHeap::handle_empty(ClassList& cl, BlockDesc& b) {
  if (&b == cl.cur || (b.flags & (kBlockCached | kBlockParked))) return;
  // A call-chain group keeps no empty block but its current one: there may
  // be many groups, each with few blocks.
  if (b.chain_group == 0 && cl.empty_kept < empty_blocks_per_class_) {
    b.flags |= kBlockCached;
    ++cl.empty_kept;
    return;
  }
  give_back_empty(cl, b);
}

bool ThreadHeap::give_back_empty(ClassList& cl, BlockDesc& b) {
  if (park_block(cl, b)) return true;
  // A notification for this block is in flight: decide when it arrives.
  if (!try_disown(b, id_)) return false;
  PageIndex p = region_.index_of(b);
  list_remove(b.flags & kBlockFull ? &cl.full : &cl.avail, p);
  source_->release(p);
  return true;
}

FreeStatus ThreadHeap::free_big(void* p, uint64_t page_desc) {
  PageDesc d = PageDesc::unpack(page_desc);
  PageIndex block{d.block};
  // The owner's free of an unsampled chunk. A sampled chunk, like a bad
  // pointer, fails free_local's state check and goes the slow way.
  if (__builtin_expect(d.kind == PageKind::kLarge, 1) &&
      owner_of(blocks_[d.block].owner_word.load(std::memory_order_relaxed)) == id_) {
    size_t usable = 0;
    LargeFreeResult r = large_.free_local(block, p, &usable);
    if (__builtin_expect(r == LargeFreeResult::kFreed || r == LargeFreeResult::kBlockEmpty, 1)) {
      count_one(counters_.large.frees);
      count_add(counters_.large.freed_bytes, usable);
      if (r == LargeFreeResult::kBlockEmpty) handle_empty_large(block);
      return FreeStatus::kOk;
    }
  }
  Offset off = static_cast<Offset>(static_cast<char*>(p) - data_);
  return free_big_slow(p, {d.kind, block, d.cls, static_cast<uint32_t>(off - (Offset{d.block} << kPageShift))});
}

FreeStatus ThreadHeap::free_huge_object(void* p, uint64_t page_desc) {
  PageDesc d = PageDesc::unpack(page_desc);
  PageIndex run{d.block};
  if (__builtin_expect(p != region_.page_address(run), 0)) return FreeStatus::kInvalid;  // inside a run
  BlockDesc& b = blocks_[d.block];
  if (__builtin_expect(b.flags & kBlockSampled, 0)) {
    // The hooks hear of a sample before its memory is freed, while nobody
    // can reuse the address.
    b.flags &= ~kBlockSampled;
    if (const SamplingHooks* hooks = sampling_hooks()) hooks->freeing(region_, p);
  }
  // Its bytes are read before the run can be someone else's.
  uint64_t bytes = b.pages.bytes();
  FreeStatus s = free_huge(run);
  if (__builtin_expect(s == FreeStatus::kOk, 1)) {
    count_one(counters_.huge.frees);
    count_add(counters_.huge.freed_bytes, bytes);
  }
  return s;
}

FreeStatus ThreadHeap::free_big_slow(void* p, const PointerInfo& at) {
  if (at.kind != PageKind::kLarge) return free_big_uncounted(p, at);
  // Counted as its allocation was: a large object, or (a sample) as its
  // mark says. The hooks hear of a sample before its memory is freed, while
  // nobody can reuse the address.
  uint32_t counted_class = kCountedLarge;
  if (ChunkHeader* c = LargeHeap::header_of(region_, secret_, at.block, p)) {
    if (uint32_t state = LargeHeap::unmark_sampled(c)) {
      if (sampled_counted_as(state) != kSampledAsLarge) counted_class = sampled_counted_as(state);
      if (const SamplingHooks* hooks = sampling_hooks()) hooks->freeing(region_, p);
    }
  }
  size_t counted_bytes = LargeHeap::usable_size(p);
  FreeStatus s = free_big_uncounted(p, at);
  if (s == FreeStatus::kOk) {
    if (counted_class < kMaxSegregatedClasses) {
      count_one(lists_[counted_class].counts.frees);
    } else {
      count_one(counters_.large.frees);
      count_add(counters_.large.freed_bytes, counted_bytes);
    }
  }
  return s;
}

FreeStatus ThreadHeap::free_big_uncounted(void* p, const PointerInfo& at) {
  if (at.kind == PageKind::kLarge) {
    BlockDesc& b = region_.block(at.block);
    if (owner_of(b.owner_word.load(std::memory_order_relaxed)) == id_) {
      switch (large_.free_local(at.block, p)) {
        case LargeFreeResult::kFreed: return FreeStatus::kOk;
        case LargeFreeResult::kBlockEmpty: handle_empty_large(at.block); return FreeStatus::kOk;
        case LargeFreeResult::kDoubleFree: return FreeStatus::kDoubleFree;
        case LargeFreeResult::kInvalid: return FreeStatus::kInvalid;
      }
    }
    switch (LargeHeap::claim_remote(region_, secret_, at.block, p)) {
      case LargeFreeResult::kDoubleFree: return FreeStatus::kDoubleFree;
      case LargeFreeResult::kInvalid: return FreeStatus::kInvalid;
      default: break;
    }
    auto* c = static_cast<ChunkHeader*>(p) - 1;
    uint32_t in_block = static_cast<uint32_t>(reinterpret_cast<char*>(c) - region_.page_address(at.block));
    if (remote_push(b, static_cast<char*>(p), in_block)) notify_owner(region_, at.block);
    return FreeStatus::kOk;
  }
  // A free page: most likely freed already; anything else (huge runs come
  // through free_huge_object) was never ours.
  return at.kind == PageKind::kFree || at.kind == PageKind::kPurging ? FreeStatus::kDoubleFree
                                                                      : FreeStatus::kInvalid;
}

FreeStatus ThreadHeap::free_huge(PageIndex run) {
  // Claim the run: a live huge object has owner word 0. A second free,
  // even a racing one, finds it taken. The claim names this thread heap, so
  // that a shared region's owner releases the run only for the process that
  // claimed it, and takes it back if that process dies first.
  BlockDesc& b = region_.block(run);
  uint32_t expected = 0;
  bool cache = huge_cache_allowed_ && b.pages.value <= kHugeCachePages;
  if (!b.owner_word.compare_exchange_strong(expected, claim_id_ << 1, std::memory_order_acq_rel)) {
    return FreeStatus::kDoubleFree;
  }
  if (!cache) {
    source_->release_huge(run);
    return FreeStatus::kOk;
  }
  huge_cache_put(run);
  return FreeStatus::kOk;
}

void ThreadHeap::handle_empty_large(PageIndex block) {
  if (kept_empty_large_ == kNoPage) {
    kept_empty_large_ = block;
    large_.keep_empty_block(block);
    return;
  }
  if (!try_disown(region_.block(block), id_)) {
    large_.keep_empty_block(block);  // decide when the notification arrives
    return;
  }
  large_.drop_block(block);
  source_->release(block);
}

// --- remote frees ---

void ThreadHeap::handle_pending_block(PageIndex p) {
  BlockDesc& b = region_.block(p);
  if (b.kind == PageKind::kLarge) {
    if (kept_empty_large_ == p) return;  // already empty and binned
    if (large_.collect_remote(p)) handle_empty_large(p);
    return;
  }
  // Only a stale free reaches a parked block (nothing in it was live): its
  // remote list is dropped when the block is formatted for reuse.
  if (b.flags & kBlockParked) return;
  char* base = region_.page_address(p);
  if (block_collect_remote(b, base) == 0) {
    if (b.used == 0) handle_empty(list_of(b), b);
    return;
  }
  ClassList& cl = list_of(b);
  if (has_room_again(b)) unfull(cl, p);
  if (b.used == 0) handle_empty(cl, b);
}

void ThreadHeap::take_pending() {
  if (!pending_nonempty(my_slot_)) return;
  for (uint32_t head = pending_take(region_, id_); head != 0;) {
    PageIndex p{head - 1};
    if (pending_settle(region_, id_, p, &head)) handle_pending_block(p);
  }
}

// --- usable size and realloc ---

size_t ThreadHeap::usable_size(void* p) const {
  PointerInfo at = locate(p);
  switch (at.kind) {
    case PageKind::kSegregated: return classes_->info(at.cls).size;
    case PageKind::kLarge: return LargeHeap::usable_size(p);
    case PageKind::kHuge: return region_.block(at.block).pages.bytes() - at.in_block;
    default: return 0;
  }
}

FreeStatus ThreadHeap::validate(const void* p) const {
  PointerInfo at = locate(p);
  switch (at.kind) {
    case PageKind::kSegregated: {
      const ClassInfo& c = classes_->info(at.cls);
      if (SizeClasses::object_index(c, at.in_block) * c.size != at.in_block || at.in_block >= c.end) {
        return FreeStatus::kInvalid;
      }
      // Atomic: another thread may be freeing it at this moment.
      char* obj = const_cast<char*>(static_cast<const char*>(p));
      return load_tag(obj) == free_tag(secret_, region_.offset_of(p)) ? FreeStatus::kDoubleFree : FreeStatus::kOk;
    }
    case PageKind::kLarge: {
      ChunkHeader* c = LargeHeap::header_of(region_, secret_, at.block, const_cast<void*>(p));
      if (c == nullptr) return FreeStatus::kInvalid;
      uint32_t state = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
      if (chunk_state_is_live(state)) return FreeStatus::kOk;
      return chunk_state_is_free(state) ? FreeStatus::kDoubleFree : FreeStatus::kInvalid;
    }
    case PageKind::kHuge:
      if (at.in_block != 0) return FreeStatus::kInvalid;
      return region_.block(at.block).owner_word.load(std::memory_order_acquire) == 0 ? FreeStatus::kOk
                                                                                      : FreeStatus::kDoubleFree;
    case PageKind::kFree:
    case PageKind::kPurging:
      return FreeStatus::kDoubleFree;
    default:
      return FreeStatus::kInvalid;
  }
}

bool ThreadHeap::resize_in_place(void* p, size_t size) {
  PointerInfo at = locate(p);
  size_t have = usable_size(p);
  switch (at.kind) {
    case PageKind::kSegregated:
      // Stay while the class fits and the object would not waste over half.
      return size <= have && (size > have / 2 || have <= kMinObject);
    case PageKind::kLarge: {
      if (size <= classes_->medium_max() || size > classes_->large_max() ||
          owner_of(region_.block(at.block).owner_word.load(std::memory_order_relaxed)) != id_ ||
          !large_.resize_in_place(at.block, p, size)) {
        return false;
      }
      // A sample counted as a size class stays counted as one object of it.
      uint32_t state = __atomic_load_n(&(static_cast<ChunkHeader*>(p) - 1)->state, __ATOMIC_ACQUIRE);
      if (!chunk_state_is_sampled(state) || sampled_counted_as(state) == kSampledAsLarge) {
        count_resized(counters_.large, have, LargeHeap::usable_size(p));
      }
      return true;
    }
    case PageKind::kHuge: {
      if (size <= classes_->large_max() || at.in_block != 0 || size > kMaxHugeBytes) return false;
      bool zeroed = false;
      PageCount want = pages_for(size);
      BlockDesc& b = region_.block(at.block);
      if (want == b.pages) return true;
      // Claimed while its pages change (as a free claims it), so that the
      // region's owner knows the request comes from a holder of the object;
      // a run claimed already is being freed: not ours to resize.
      uint32_t expected = 0;
      if (!b.owner_word.compare_exchange_strong(expected, claim_id_ << 1, std::memory_order_acq_rel)) return false;
      bool resized = source_->resize_huge(at.block, want, &zeroed);
      b.owner_word.store(0, std::memory_order_release);
      if (!resized) return false;
      count_resized(counters_.huge, have, want.bytes());
      return true;
    }
    default:
      return false;
  }
}

// Huge objects of at least this many pages move by remapping their pages
// when the source can (anonymous memory). Measured here (mremap with
// MREMAP_DONTUNMAP against memcpy): to a destination not yet resident the
// move wins from 256 KiB on (8 MiB: 58 us against 2.7 ms); to a resident
// one, whose pages the move must free, it ties at 512 KiB-2 MiB and wins
// past. A copy also leaves both runs resident.
constexpr uint32_t kMoveMinPages = 128;

void ThreadHeap::move_or_copy(void* to, void* from, size_t bytes) {
  PageCount pages{static_cast<uint32_t>(std::min<size_t>(bytes >> kPageShift, UINT32_MAX))};
  if (pages.value >= kMoveMinPages) {  // only then are both huge runs worth locating
    PointerInfo src = locate(from), dst = locate(to);
    if (src.kind == PageKind::kHuge && dst.kind == PageKind::kHuge && src.in_block == 0 && dst.in_block == 0 &&
        source_->move_huge(src.block, dst.block, pages)) {
      std::memcpy(static_cast<char*>(to) + pages.bytes(), static_cast<char*>(from) + pages.bytes(),
                  bytes - pages.bytes());
      return;
    }
  }
  std::memcpy(to, from, bytes);
}

void* ThreadHeap::realloc(void* p, size_t size) {
  if (resize_in_place(p, size)) return p;
  size_t have = usable_size(p);
  void* q = alloc(size);
  if (q == nullptr) return nullptr;
  move_or_copy(q, p, std::min(have, size));
  free(p);
  return q;
}

// --- compaction and exit ---

void ThreadHeap::release_huge_cache() {
  HugeCache& c = huge_cache_;
  for (uint32_t i = 0; i < c.count; ++i) source_->release_huge(c.runs[i]);
  c.count = 0;
  c.pages = 0;
}

void ThreadHeap::release_empty() {
  flush_remote_frees();
  release_huge_cache();
  take_pending();
  release_all_parked(false);
  for_each_class_list([this](ClassList& cl) {
    for (PageIndex p = cl.avail.head; p != kNoPage;) {
      BlockDesc& b = region_.block(p);
      PageIndex next = b.next;
      block_collect_remote(b, region_.page_address(p));
      if (b.used == 0 && try_disown(b, id_)) {
        if (b.flags & kBlockCached) --cl.empty_kept;
        list_remove(&cl.avail, p);
        source_->release(p);
      }
      p = next;
    }
    refresh_cur(cl);
  });
  large_.flush_quick([this](PageIndex block) { handle_empty_large(block); });
  if (kept_empty_large_ != kNoPage && try_disown(region_.block(kept_empty_large_), id_)) {
    large_.forget_empty_block(kept_empty_large_);
    large_.drop_block(kept_empty_large_);
    source_->release(kept_empty_large_);
    kept_empty_large_ = kNoPage;
  }
}

void ThreadHeap::disown_blocking(BlockDesc& b) {
  // Our stack is closed: a notifier in flight fails and takes its bit back.
  // A notifier of another process may have died between setting the bit
  // and pushing (kill -9): after a second of waiting, the bit is taken
  // from it. Anything it would still do fails against the closed stack.
  timespec start;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &start);
  for (uint32_t spins = 0; !try_disown(b, id_); ++spins) {
    if (spins <= 64) continue;
    sched_yield();
    if (spins % 1024 != 0) continue;
    timespec now;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    if (now.tv_sec - start.tv_sec >= 2) {
      uint32_t stuck = id_ << 1 | 1;
      if (b.owner_word.compare_exchange_strong(stuck, 0, std::memory_order_seq_cst)) return;
    }
  }
}

void ThreadHeap::retire_block(PageIndex p, bool empty) {
  disown_blocking(region_.block(p));
  if (empty) source_->release(p);
  else source_->abandon(p);
}

void ThreadHeap::abandon_all() {
  // First: the batch may hold objects of our own blocks (adopted since),
  // which the collection below then finds on their lists.
  flush_remote_frees();
  pool_cache_flush(region_, &pool_cache);
  pool_cache.record = nullptr;  // its owner slot's: the next holder's now
  release_huge_cache();
  // Settle what was pending; the remote lists are collected below.
  for (uint32_t head = pending_close(region_, id_); head != 0;) {
    pending_settle(region_, id_, PageIndex{head - 1}, &head);
  }
  for_each_class_list([this](ClassList& cl) {
    for (BlockList* list : {&cl.avail, &cl.full}) {
      while (list->head != kNoPage) {
        PageIndex p = list->head;
        BlockDesc& b = region_.block(p);
        list_remove(list, p);
        block_collect_remote(b, region_.page_address(p));
        b.flags &= ~(kBlockFull | kBlockCached);
        b.chain_group = 0;
        retire_block(p, b.used == 0);
      }
    }
    cl.cur = &empty_block;
    cl.empty_kept = 0;
  });
  release_all_parked(true);
  chain_groups_ready_ = 0;
  // The large heap is torn down whole. Merge its quick cache while the bins
  // are still good, then forget the bins: blocks released below may be
  // reused by other threads at once, so no bin link may point into them.
  // Each block's remote frees are then merged without bins.
  large_.flush_quick([](PageIndex) {});
  large_.forget_bins();
  while (large_.first_block() != kNoPage) {
    PageIndex p = large_.first_block();
    large_.drop_block(p);
    retire_block(p, LargeHeap::collect_abandoned(region_, p));
  }
  kept_empty_large_ = kNoPage;
  large_.init(region_, region_.header->params.large_max, region_.header->params.large_block_pages, secret_);
}

void ThreadHeap::reset() {
  pending_open(region_, id_);
  init(region_, classes_, source_, id_);
}

}  // namespace memd::heap
