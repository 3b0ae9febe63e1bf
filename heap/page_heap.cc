#include "heap/page_heap.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "heap/crash_point.h"

namespace memd::heap {
namespace {

constexpr uint32_t kGrowMinPages = 2048;  // 8 MiB: commit in large steps

// The page heap's books (bins, LRU, run lengths, page descriptors) live in
// the region, which its clients map writable: every link and length read
// back from there is checked before it indexes anything, so that whatever a
// client wrote costs at most the region's own consistency (which check
// reports), never a write outside the tables or the mapping, or a loop
// without end. A link that names no committed page ends its list; a length
// is cut to the committed pages. The committed count is itself cut to the
// reservation as this process mapped it (Region::committed_pages, page_limit): below it the
// tables are committed (a count a client raised still stays in the mapping,
// which a shared region's object backs whole), and above it nothing is.

// `p` if it names a committed page, else kNoPage. Inline: the lists follow
// one at every step, and a call costs more than the check. Relaxed: every
// caller holds the page-heap lock, as grow does when it raises the count.
__attribute__((always_inline)) inline PageIndex link(const Region& r, PageIndex p) {
  return p.value < r.committed_pages(std::memory_order_relaxed) ? p : kNoPage;
}

// A run's length as read from the region, cut to [1, the committed pages
// from `first` on]. REQUIRES: `first` is committed.
__attribute__((always_inline)) inline PageCount run_length(const Region& r, PageIndex first, PageCount n) {
  uint32_t room = r.committed_pages(std::memory_order_relaxed) - first.value;
  return {std::clamp<uint32_t>(n.value, 1, std::max<uint32_t>(room, 1))};
}

uint32_t bin_of(PageCount n) {
  if (n.value == 0) return 0;  // only a length someone overwrote
  if (n.value <= kExactRunBins) return n.value - 1;
  uint32_t log2 = 31 - static_cast<uint32_t>(__builtin_clz(n.value));
  return kExactRunBins + (log2 - 7);
}

bool is_dirty(uint8_t state) { return state == kRunDirty; }

RunBins& bins_for(const Region& r, uint8_t state) {
  return is_dirty(state) ? r.header->page_heap.dirty : r.header->page_heap.clean;
}

void set_bin_bit(RunBins& bins, uint32_t bin, bool on) {
  uint64_t bit = uint64_t{1} << (bin % 64);
  if (on) bins.nonempty[bin / 64] |= bit;
  else bins.nonempty[bin / 64] &= ~bit;
}

// --- bins (doubly linked through BlockDesc::prev/next) ---

void bin_insert(const Region& r, PageIndex run) {
  BlockDesc& b = r.block(run);
  RunBins& bins = bins_for(r, b.run_state);
  uint32_t bin = bin_of(b.pages);
  b.prev = kNoPage;
  b.next = link(r, bins.head[bin]);
  if (b.next != kNoPage) r.block(b.next).prev = run;
  bins.head[bin] = run;
  set_bin_bit(bins, bin, true);
}

void bin_remove(const Region& r, PageIndex run) {
  BlockDesc& b = r.block(run);
  RunBins& bins = bins_for(r, b.run_state);
  uint32_t bin = bin_of(b.pages);
  PageIndex prev = link(r, b.prev), next = link(r, b.next);
  if (prev != kNoPage) r.block(prev).next = next;
  else bins.head[bin] = next;
  if (next != kNoPage) r.block(next).prev = prev;
  if (bins.head[bin] == kNoPage) set_bin_bit(bins, bin, false);
}

// --- the LRU of dirty runs (BlockDesc::lru.prev/lru.next) ---

void lru_push_newest(const Region& r, PageIndex run) {
  PageHeapState& s = r.header->page_heap;
  BlockDesc& b = r.block(run);
  b.lru.next = kNoPage;
  b.lru.prev = link(r, s.lru_newest);
  if (b.lru.prev != kNoPage) r.block(b.lru.prev).lru.next = run;
  else s.lru_oldest = run;
  s.lru_newest = run;
}

void lru_remove(const Region& r, PageIndex run) {
  PageHeapState& s = r.header->page_heap;
  BlockDesc& b = r.block(run);
  PageIndex prev = link(r, b.lru.prev), next = link(r, b.lru.next);
  // The list's ends move off `run` whatever its links say: a link a client
  // overwrote must not leave an end on a run that has left the list.
  if (prev != kNoPage && s.lru_oldest != run) r.block(prev).lru.next = next;
  else s.lru_oldest = next;
  if (next != kNoPage && s.lru_newest != run) r.block(next).lru.prev = prev;
  else s.lru_newest = prev;
}

// Marks the ends of a free run so that neighbours can find its start.
void mark_run_ends(const Region& r, PageIndex first, PageCount n, PageKind kind) {
  PageDesc d{first.value, 0, kind, 0};
  r.set_page(first, d);
  r.set_page(first + PageCount{n.value - 1}, d);
}

// Records a free run (not coalesced) in the bins and, if dirty, the LRU.
// REQUIRES: the run is committed (its callers cut what they read).
void run_insert(const Region& r, PageIndex first, PageCount n, uint8_t state, uint32_t freed_ms) {
  BlockDesc& b = r.block(first);
  b.kind = PageKind::kFree;
  b.pages = n;
  b.run_state = state;
  b.freed_ms = freed_ms;
  mark_run_ends(r, first, n, PageKind::kFree);
  bin_insert(r, first);
  if (is_dirty(state)) {
    lru_push_newest(r, first);
    r.header->page_heap.dirty_pages += n.value;
  } else {
    r.header->page_heap.discarded_pages += n.value;
  }
}

void run_remove(const Region& r, PageIndex first) {
  BlockDesc& b = r.block(first);
  bin_remove(r, first);
  if (is_dirty(b.run_state)) {
    lru_remove(r, first);
    r.header->page_heap.dirty_pages -= b.pages.value;
  } else {
    r.header->page_heap.discarded_pages -= b.pages.value;
  }
}

// The start of the free run holding page `p`, or kNoPage if `p` is not the
// end page of a free run.
PageIndex free_run_at(const Region& r, PageIndex p) {
  PageDesc d = r.page(p);
  return d.kind == PageKind::kFree ? link(r, PageIndex{d.block}) : kNoPage;
}

// Clean runs merge whatever their history; the result counts as discarded if
// any part was (so that reusing it counts as refaulting).
uint8_t merged_state(uint8_t a, uint8_t b) { return a > b ? a : b; }

// Inserts [first, first + n) as a free run of `state`, merging with free
// neighbours that are dirty alike; returns the start of the merged run.
// REQUIRES: its pages are marked kFree.
PageIndex run_free_coalesced(const Region& r, PageIndex first, PageCount n, uint8_t state,
                             uint32_t now_ms) {
  uint32_t committed = r.committed_pages();
  if (first.value > 0) {
    PageIndex left = free_run_at(r, PageIndex{first.value - 1});
    if (left != kNoPage && left < first && is_dirty(r.block(left).run_state) == is_dirty(state)) {
      state = merged_state(state, r.block(left).run_state);
      n.value += first.value - left.value;
      run_remove(r, left);
      first = left;
    }
  }
  PageIndex after = first + n;
  if (after.value < committed) {
    PageIndex right = free_run_at(r, after);
    if (right == after && is_dirty(r.block(right).run_state) == is_dirty(state)) {
      state = merged_state(state, r.block(right).run_state);
      n.value += run_length(r, right, r.block(right).pages).value;
      run_remove(r, right);
    }
  }
  run_insert(r, first, n, state, now_ms);
  return first;
}

// The better of two fitting runs: the smaller, then the lower address (the
// low end fills first and the high end keeps long runs). kNoPage loses.
PageIndex better_fit(const Region& r, PageIndex a, PageIndex b) {
  if (a == kNoPage) return b;
  if (b == kNoPage) return a;
  uint32_t na = r.block(a).pages.value, nb = r.block(b).pages.value;
  if (na != nb) return na < nb ? a : b;
  return a.value < b.value ? a : b;
}

// Best fit among the first `limit` runs of a bin holding at least `n` pages.
PageIndex bin_best_fit(const Region& r, PageIndex head, PageCount n, uint32_t limit) {
  // The hottest walk of the page heap: the bound is read once; a link past
  // it (kNoPage included) ends the walk; a run whose length runs past it was
  // overwritten and is passed over.
  const uint32_t pages_max = r.committed_pages();
  PageIndex best = kNoPage;
  uint32_t scanned = 0;
  for (PageIndex p = head; p.value < pages_max && scanned < limit; p = r.block(p).next, ++scanned) {
    uint32_t pages = r.block(p).pages.value;
    if (pages >= n.value && pages <= pages_max - p.value) best = better_fit(r, best, p);
  }
  return best;
}

// Best fit among runs of `bins`: a run of the request's own bin (exact, or
// the smallest fitting of a power-of-two bin), else the best of the first
// nonempty bin above. Scans are bounded; within a bin, lower addresses win.
PageIndex bins_find(const Region& r, const RunBins& bins, PageCount n) {
  constexpr uint32_t kScan = 16;
  uint32_t bin = bin_of(n);
  if (bins.head[bin] != kNoPage) {
    PageIndex best = bin_best_fit(r, bins.head[bin], n, kScan);
    if (best != kNoPage) return best;
  }
  ++bin;
  for (uint32_t w = bin / 64; w < kRunBinWords; ++w) {
    uint64_t bits = bins.nonempty[w];
    if (w == bin / 64) bits &= ~uint64_t{0} << (bin % 64);
    if (bits == 0) continue;
    uint32_t found = w * 64 + static_cast<uint32_t>(__builtin_ctzll(bits));
    return found < kRunBins ? bin_best_fit(r, bins.head[found], n, kScan) : kNoPage;
  }
  return kNoPage;
}

// Commits block-descriptor entries for pages below `pages` (the page
// descriptors are committed whole at format time).
bool commit_tables(const Region& r, MemorySource& source, uint32_t pages) {
  PageHeapState& s = r.header->page_heap;
  if (pages <= s.table_pages) return true;
  // Commit in steps of whole table pages: 512 page descriptors or 64 blocks.
  uint32_t target = std::min(r.page_limit(), (pages + 4095) & ~4095u);
  auto commit_range = [&](uint64_t table, size_t entry, uint32_t from, uint32_t to) {
    size_t lo = (table + from * entry) & ~(kPageSize - 1);
    size_t hi = (table + to * entry + kPageSize - 1) & ~(kPageSize - 1);
    return lo >= hi || source.commit(lo, hi - lo);
  };
  if (!commit_range(r.offset_in_mapping(r.blocks), sizeof(BlockDesc), s.table_pages, target)) {
    return false;
  }
  s.table_pages = target;
  return true;
}

// Whether pages of a run in `state` need their backing allocated before use.
bool needs_recommit(const MemorySource& source, uint8_t state) {
  return state == kRunDiscarded || (state == kRunFresh && source.commits_on_use());
}

// Adds at least `n` fresh (clean) pages at the top of the region. The room
// left is measured against this process's mapping: a header a client raised
// (its page count or committed count) must not send the descriptors written
// below past the tables.
bool grow(const Region& r, MemorySource& source, PageCount n) {
  PageHeapState& s = r.header->page_heap;
  uint32_t committed = s.committed_pages.load(std::memory_order_relaxed);
  uint32_t room = committed < r.page_limit() ? r.page_limit() - committed : 0;
  if (n.value > room) {
    errno = ENOMEM;
    return false;
  }
  uint32_t step = std::min(room, std::max({n.value, kGrowMinPages, committed / 8}));
  // A backing object shorter than the reservation grows first (online
  // growth): no page is handed out past its end. Retry with exactly what is
  // needed before giving up (a quota may leave room for that).
  if (!source.extend(data_offset_of(r, PageIndex{committed + step}))) {
    step = n.value;
    if (!source.extend(data_offset_of(r, PageIndex{committed + step}))) return false;
  }
  if (!commit_tables(r, source, committed + step)) return false;
  if (!source.commits_on_use() &&
      !source.commit(data_offset_of(r, PageIndex{committed}), PageCount{step}.bytes())) {
    // Retry with exactly what is needed before giving up.
    step = n.value;
    if (!source.commit(data_offset_of(r, PageIndex{committed}), PageCount{step}.bytes())) return false;
  }
  PageIndex first{committed};
  for (uint32_t i = 0; i < step; ++i) r.set_page(first + PageCount{i}, {first.value, 0, PageKind::kFree, 0});
  s.committed_pages.store(committed + step, std::memory_order_release);
  run_free_coalesced(r, first, PageCount{step}, kRunFresh, 0);
  return true;
}

// Splits run `run` so that pages [run + skip, run + skip + n) are taken; the
// rest stays free in the same state.
void take_from_run(const Region& r, PageIndex run, PageCount skip, PageCount n) {
  BlockDesc& b = r.block(run);
  uint8_t state = b.run_state;
  uint32_t freed_ms = b.freed_ms;
  PageCount total = run_length(r, run, b.pages);
  run_remove(r, run);
  if (state == kRunDiscarded) r.header->page_heap.refault_pages += n.value;
  if (skip.value > 0) run_insert(r, run, skip, state, freed_ms);
  uint32_t tail = total.value > skip.value + n.value ? total.value - skip.value - n.value : 0;
  if (tail > 0) run_insert(r, run + skip + n, PageCount{tail}, state, freed_ms);
}

// The first page's descriptor is written last: recovery after a crash takes
// a block as in use only if its first page says so and every other page
// agrees (see recovery.h), so a block half marked is still free.
void mark_in_use(const Region& r, PageIndex first, PageCount n, PageKind kind, uint16_t cls) {
  BlockDesc& b = r.block(first);
  b.kind = kind;
  b.cls = cls;
  b.pages = n;
  // Nothing allocated from it yet, whatever the descriptor held before
  // (taken shares its bytes with the LRU links the run had).
  b.end = 0;
  b.taken = 0;
  b.bump = 0;
  b.used = 0;
  b.free_head = 0;
  set_descriptors_durable(b, false);
  PageDesc d{first.value, cls, kind, 0};
  for (uint32_t i = 1; i < n.value; ++i) r.set_page(first + PageCount{i}, d);
  crash_point("page_heap.mark_in_use");  // every page but the first says so
  r.set_page(first, d);
  r.header->page_heap.in_use_pages += n.value;
}

// Pages to skip from `p` so that the address (in this process's mapping) is
// a multiple of `align` pages.
PageCount align_skip(const Region& r, PageIndex p, PageCount align) {
  uint64_t page_number = (reinterpret_cast<uintptr_t>(r.data) >> kPageShift) + p.value;
  return {static_cast<uint32_t>((align.value - page_number % align.value) % align.value)};
}

// Where no free run fits `n` pages: the free run at the top of the committed
// pages, if there is one, with just enough new pages after it. Growing by
// the whole request instead leaves that run aside, and when it is dirty
// (resident) a program whose big buffers come and go over a range of sizes
// touches ever more pages: each miss faults in new ones while the freed
// ones wait for a request they fit.
struct TopRun {
  PageIndex run = kNoPage;  // a free run of at least n pages at the top, to take from its start
  bool done = false;        // else: `allocation` is the answer (taken here, or failed)
  RunAllocation allocation;
};
TopRun top_run_with_room(const Region& r, MemorySource& source, PageCount n, PageKind kind, uint16_t cls) {
  const uint32_t committed = r.committed_pages();
  PageIndex top = committed > 0 ? free_run_at(r, PageIndex{committed - 1}) : kNoPage;
  if (top == kNoPage) return {};  // the caller grows by the whole request
  const uint8_t top_state = r.block(top).run_state;
  const PageCount have = run_length(r, top, r.block(top).pages);
  if (have.value >= n.value) return {top, false, {}};
  TopRun failed{kNoPage, true, {}};
  if (!grow(r, source, PageCount{n.value - have.value})) {
    errno = ENOMEM;
    return failed;
  }
  if (!is_dirty(top_state)) return {free_run_at(r, PageIndex{committed - 1}), false, {}};  // merged with them
  // Fresh pages do not merge with a dirty run: take the run whole and the
  // first of them.
  PageIndex fresh{committed};
  PageCount from_fresh{n.value - have.value};
  if (needs_recommit(source, kRunFresh) && !source.recommit(data_offset_of(r, fresh), from_fresh.bytes())) {
    errno = ENOMEM;
    return failed;
  }
  run_remove(r, top);
  take_from_run(r, fresh, PageCount{0}, from_fresh);
  mark_in_use(r, top, n, kind, cls);
  return {kNoPage, true, {top, false}};
}

}  // namespace

RunAllocation page_heap_alloc(const Region& r, MemorySource& source, PageCount n,
                              PageKind kind, uint16_t cls, PageCount align) {
  if (n.value == 0) n.value = 1;
  // Over-ask by the alignment so that an aligned start fits in any run found.
  PageCount need{n.value + align.value - 1};
  if (need.value < n.value) {
    errno = ENOMEM;
    return {};
  }
  // Dirty runs cost no page faults, so the best-fitting dirty run wins; a
  // clean run only where none fits, or where the clean one fits exactly and
  // the dirty one does not (a hole filled, no long run cut). Best fit over
  // both (as it was) let small clean runs win over a long dirty one: a
  // program whose freed blocks had merged into one dirty run faulted in
  // the pages a purge had just given back, left the dirty pages unused,
  // and the next purge gave those back in turn (wl_phases).
  PageIndex dirty = bins_find(r, r.header->page_heap.dirty, need);
  PageIndex clean = bins_find(r, r.header->page_heap.clean, need);
  PageIndex run = dirty;
  if (clean != kNoPage &&
      (dirty == kNoPage || (r.block(clean).pages.value == need.value && r.block(dirty).pages.value != need.value))) {
    run = clean;
  }
  if (run == kNoPage && align.value == 1) {
    TopRun top = top_run_with_room(r, source, n, kind, cls);
    if (top.done) return top.allocation;
    run = top.run;
  }
  if (run == kNoPage) {
    if (!grow(r, source, need)) return {};
    run = bins_find(r, r.header->page_heap.clean, need);
    if (run == kNoPage) {
      errno = ENOMEM;
      return {};
    }
  }
  bool zeroed = !is_dirty(r.block(run).run_state);
  PageCount skip = align_skip(r, run, align);
  if (needs_recommit(source, r.block(run).run_state) &&
      !source.recommit(data_offset_of(r, run + skip), n.bytes())) {
    errno = ENOMEM;
    return {};
  }
  take_from_run(r, run, skip, n);
  PageIndex first = run + skip;
  mark_in_use(r, first, n, kind, cls);
  return {first, zeroed};
}

void page_heap_free(const Region& r, PageIndex first, PageCount n, uint32_t now_ms) {
  if (link(r, first) == kNoPage) return;  // names no page: nothing to free
  n = run_length(r, first, n);
  r.set_page(first, {first.value, 0, PageKind::kFree, 0});
  crash_point("page_heap.free");  // the first page is free, the others not yet
  for (uint32_t i = 1; i < n.value; ++i) r.set_page(first + PageCount{i}, {first.value, 0, PageKind::kFree, 0});
  r.header->page_heap.in_use_pages -= n.value;
  run_free_coalesced(r, first, n, kRunDirty, now_ms);
}

bool page_heap_extend(const Region& r, MemorySource& source, PageIndex first, PageCount have,
                      PageCount want, bool* zeroed) {
  PageIndex after = first + have;
  if (after.value >= r.committed_pages()) return false;
  PageIndex run = free_run_at(r, after);
  if (run != after) return false;
  PageCount extra{want.value - have.value};
  if (run_length(r, run, r.block(run).pages).value < extra.value) return false;
  if (needs_recommit(source, r.block(run).run_state) &&
      !source.recommit(data_offset_of(r, run), extra.bytes())) {
    return false;
  }
  *zeroed = !is_dirty(r.block(run).run_state);
  take_from_run(r, run, PageCount{0}, extra);
  PageDesc d = r.page(first);
  set_descriptors_durable(r.block(first), false);
  for (uint32_t i = have.value; i < want.value; ++i) r.set_page(first + PageCount{i}, d);
  r.block(first).pages = want;
  r.header->page_heap.in_use_pages += extra.value;
  return true;
}

void page_heap_shrink(const Region& r, PageIndex first, PageCount have, PageCount want,
                      uint32_t now_ms) {
  set_descriptors_durable(r.block(first), false);
  r.block(first).pages = want;
  page_heap_free(r, first + want, PageCount{have.value - want.value}, now_ms);
}

PageCount page_heap_trim(const Region& r, MemorySource& source) {
  PageHeapState& s = r.header->page_heap;
  uint32_t committed = r.committed_pages(std::memory_order_relaxed);
  if (committed == 0) return {0};
  // Only a run in the bins: a run being discarded outside the lock is
  // kPurging, which free_run_at does not name.
  PageIndex run = free_run_at(r, PageIndex{committed - 1});
  if (run == kNoPage || r.page(run).kind != PageKind::kFree || r.page(run).block != run.value) return {0};
  PageCount n = run_length(r, run, r.block(run).pages);
  if (run.value + n.value != committed) return {0};
  // The object first: if it cannot shrink, nothing changed. A crash after
  // it leaves free pages past the end, which the next owner cuts off (they
  // are never touched before).
  if (!source.shrink(data_offset_of(r, run))) return {0};
  run_remove(r, run);
  s.committed_pages.store(run.value, std::memory_order_release);
  for (uint32_t i = 0; i < n.value; ++i) r.set_page(run + PageCount{i}, PageDesc{});
  return n;
}

void page_heap_reset(const Region& r) {
  PageHeapState& s = r.header->page_heap;
  s.in_use_pages = s.dirty_pages = s.discarded_pages = 0;
  s.lru_oldest = s.lru_newest = kNoPage;
  s.refault_pages = 0;
  std::fill(std::begin(s.dirty.head), std::end(s.dirty.head), kNoPage);
  std::fill(std::begin(s.clean.head), std::end(s.clean.head), kNoPage);
  std::fill(std::begin(s.dirty.nonempty), std::end(s.dirty.nonempty), 0);
  std::fill(std::begin(s.clean.nonempty), std::end(s.clean.nonempty), 0);
}

void page_heap_add_free(const Region& r, PageIndex first, PageCount n, uint8_t state) {
  for (uint32_t i = 0; i < n.value; ++i) r.set_page(first + PageCount{i}, {first.value, 0, PageKind::kFree, 0});
  run_free_coalesced(r, first, n, state, 0);
}

void page_heap_count_in_use(const Region& r, PageCount n) { r.header->page_heap.in_use_pages += n.value; }

void page_heap_select_purge(const Region& r, uint32_t now_ms, uint32_t limit_pages,
                            uint32_t decay_ms, PurgeBatch* batch) {
  PageHeapState& s = r.header->page_heap;
  while (batch->count < PurgeBatch::kMaxRuns && s.lru_oldest != kNoPage) {
    PageIndex run = link(r, s.lru_oldest);
    // Only the start of a dirty free run belongs on the LRU. Anything else
    // there was written by a client, and purging it would come round again
    // (a run discarded below leaves the LRU through its own links, which
    // may point elsewhere): the rest of the LRU is lost to purging.
    PageDesc d = run == kNoPage ? PageDesc{} : r.page(run);
    if (run == kNoPage || d.kind != PageKind::kFree || d.block != run.value ||
        !is_dirty(r.block(run).run_state)) {
      s.lru_oldest = s.lru_newest = kNoPage;
      break;
    }
    BlockDesc& b = r.block(run);
    bool over_limit = s.dirty_pages > limit_pages;
    bool too_old = static_cast<uint32_t>(now_ms - b.freed_ms) >= decay_ms;
    if (!over_limit && !too_old) break;
    PageCount n = run_length(r, run, b.pages);
    run_remove(r, run);
    mark_run_ends(r, run, n, PageKind::kPurging);
    batch->first[batch->count] = run;
    batch->pages[batch->count] = n;
    ++batch->count;
  }
}

void page_heap_finish_purge(const Region& r, PurgeBatch* batch) {
  PageHeapState& s = r.header->page_heap;
  for (uint32_t i = 0; i < batch->count; ++i) {
    mark_run_ends(r, batch->first[i], batch->pages[i], PageKind::kFree);
    s.discarded_total += batch->pages[i].value;
    PageIndex merged = run_free_coalesced(r, batch->first[i], batch->pages[i], kRunDiscarded, 0);
    batch->first[i] = merged;
    batch->pages[i] = r.block(merged).pages;
  }
  s.discard_calls += batch->count;
}

}  // namespace memd::heap
