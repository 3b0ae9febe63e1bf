// memd::Region's debug and profile methods (Vmalloc's Vmdebug and
// Vmprofile) in a shared or persistent region. Each object is a debug block
// (heap/debug_block.h) of the region's best heap: a header, guards on both
// sides, its state word measured from the region's data start so that every
// process (each mapping the region at its own address) reads it alike. The
// header's flags carry the allocating site's index in the region's site
// table (heap/site_table.h), where every process counts. Nothing is kept
// per process but settings: any process may free any object, and a report
// names the site that allocated it wherever that was.
//
// Unlike the private debug method (client/debug_method.h), a freed block
// goes back to the heap at once: a quarantine in one process would hold
// memory other processes cannot see, and leak it when that process dies. A
// second free is still told from a stray pointer by the heap's own books.
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "absl/strings/str_cat.h"
#include "heap/debug_block.h"
#include "heap/inspect.h"
#include "heap/site_table.h"
#include "region/call_site.h"
#include "region/debug_report.h"
#include "region/diag.h"
#include "region/profile_sites.h"
#include "region/region.h"
#include "region/region_impl.h"
#include "region/report_line.h"
#include "region/site_text.h"

namespace memd {
namespace {

using heap::DebugHeader;
using heap::DebugSite;
using heap::DebugState;
using region::Line;

// A block's site index (+1; 0: none) in its header's flags, above the
// debug bits, as the private method keeps its profile index.
constexpr unsigned kSiteShift = 8;
// Before a block whose lead is not zero (an alignment past 16), the raw
// allocation's first word says the lead, so a walk of the heap's slots
// finds the header.
constexpr uint64_t kLeadMark = 0x6c6561642d646267ull;

thread_local const DebugSite* innermost_site = nullptr;

uintptr_t origin_of(const RegionImpl& impl) { return reinterpret_cast<uintptr_t>(impl.region.data); }
uint64_t secret_of(const RegionImpl& impl) { return impl.region.secret; }

}  // namespace

namespace region {

const heap::DebugSite* current_call_site() { return innermost_site; }

CallSiteScope::CallSiteScope(const heap::DebugSite& site) : site_(site), outer_(innermost_site) {
  innermost_site = &site_;
}
CallSiteScope::~CallSiteScope() { innermost_site = outer_; }

}  // namespace region

namespace {

DebugSite site_or(const void* caller) {
  if (const DebugSite* s = region::current_call_site()) return *s;
  return DebugSite{nullptr, 0, caller};
}

// The site's index in the table, made on first use.
uint32_t lookup_index(heap::SiteTable& t, const DebugSite& site) {
  if (site.file != nullptr) return heap::site_index(t, site.file, site.line, false);
  Line l;
  region::add_code_address(l, site.pc);
  l.buf[l.len] = '\0';
  return heap::site_index(t, l.buf, 0, true);
}

// The same through the process's cache of the region's sites: naming a
// return address takes a dladdr and hashing its text, about 200 ns, at every
// allocation otherwise. One word per entry: the key's hash above, the index
// + 1 below (a hash that matches by chance, 1 in 2^53, would count a call
// under another site; no memory is at stake). A slot's index never changes
// once made. Not thread-local: the shim's daemon link is loaded with
// dlopen, where static TLS is scarce.
uint32_t index_of(RegionImpl& impl, heap::SiteTable& t, const DebugSite& site) {
  const void* key = site.file != nullptr ? static_cast<const void*>(site.file) : site.pc;
  uint64_t h = (reinterpret_cast<uintptr_t>(key) + site.line * 0x100000001b3ull) * 0x9e3779b97f4a7c15ull;
  h ^= h >> 29;
  uint64_t tag = h >> 11;
  std::atomic<uint64_t>& e = impl.site_cache[h & (RegionImpl::kSiteCache - 1)];
  uint64_t v = e.load(std::memory_order_relaxed);
  if ((v & 2047) != 0 && (v >> 11) == tag) return static_cast<uint32_t>((v & 2047) - 1);
  uint32_t index = lookup_index(t, site);
  if (index != heap::SiteTable::kOther) e.store(tag << 11 | (index + 1), std::memory_order_relaxed);
  return index;
}

// What the table says of a site: "file,line" or "object+0xoffset".
void add_table_site(Line& l, const heap::SiteTable* t, uint32_t flags) {
  const char* text;
  uint32_t line;
  bool is_pc;
  if (t == nullptr || (flags >> kSiteShift) == 0 || !heap::site_name(*t, (flags >> kSiteShift) - 1, &text, &line, &is_pc)) {
    l.add("(unknown)");
    return;
  }
  // Another process may be writing the slot: at most its bytes, however
  // they end.
  char copy[sizeof(heap::SharedSite::text)];
  std::memcpy(copy, text, sizeof copy - 1);
  copy[sizeof copy - 1] = '\0';
  l.add(copy);
  if (!is_pc) {
    l.add(",");
    l.add_decimal(line);
  }
}


}  // namespace

// The debug block whose user bytes start at p, if p is one this region's
// method made and it is live or freed with its header intact.
static DebugState classify(const RegionImpl& impl, const void* p) {
  const char* c = static_cast<const char*>(p);
  if (!impl.region.contains(p) || (reinterpret_cast<uintptr_t>(p) & 15) != 0 ||
      c - impl.region.data < static_cast<ptrdiff_t>(heap::kDebugHeadBytes)) {
    return DebugState::kNotABlock;
  }
  DebugState state = heap::debug_state(p, secret_of(impl), origin_of(impl));
  // A header any process of the region can write: its size must keep the
  // back guard inside the region before anything reads there.
  uint64_t size = heap::debug_header(p)->size;
  uint64_t room = static_cast<uint64_t>(impl.region.data + impl.region.data_bytes - c);
  if (state != DebugState::kNotABlock && (size > room || room - size < heap::kDebugGuardBytes)) {
    return DebugState::kNotABlock;
  }
  return state;
}

// A live block whose raw allocation the heap's books say is a live object.
// A header is only as good as the process that last wrote it: one forged
// inside another object (any process of the region knows its secret) must
// not free, mark or size anything.
static bool live_in_heap(const RegionImpl& impl, const void* p) {
  if (classify(impl, p) != DebugState::kLive) return false;
  const void* raw = heap::debug_raw(const_cast<void*>(p));
  return impl.region.contains(raw) &&
         region::thread_heap_or_stranger(impl.handle)->validate(raw) == heap::FreeStatus::kOk;
}

heap::SiteTable* Region::site_table() const {
  void* s = impl_->method_state.load(std::memory_order_acquire);
  return static_cast<heap::SiteTable*>(s != nullptr ? s : method_state());
}

void Region::set_debug_options(const DebugOptions& options) { impl_->debug_options = options; }

bool Region::watch(const void* address) {
  if (impl_->method != Method::kDebug) return false;
  int n = impl_->watch_count.load(std::memory_order_acquire);
  do {
    if (n >= RegionImpl::kMaxWatches) return false;
  } while (!impl_->watch_count.compare_exchange_weak(n, n + 1, std::memory_order_acq_rel));
  impl_->watches[n].store(reinterpret_cast<uintptr_t>(address), std::memory_order_release);
  return true;
}

static bool watched(const RegionImpl& impl, const void* p) {
  int n = impl.watch_count.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    if (impl.watches[i].load(std::memory_order_acquire) == reinterpret_cast<uintptr_t>(p)) return true;
  }
  return false;
}

static void alert(const RegionImpl& impl, const void* user, const char* what, const DebugSite& detected) {
  region::write_debug_alert(impl.name.c_str(), user, heap::debug_header(user)->size, what, detected);
}

// Writes the report; a call given a bad address is also a kBadAddress
// event (an overwrite is a report only: the call goes on).
static void finish_error(const RegionImpl& impl, Line& l, const void* block, const char* what, bool bad_address) {
  l.add("\n");
  l.write_out();
  if (bad_address) impl.event(RegionEvent::kBadAddress, block, what);
  if (impl.debug_options.abort) std::abort();
}

// Reports a live block whose guards were overwritten, once across
// processes; true if they are.
static bool check_block(const RegionImpl& impl, const heap::SiteTable* t, void* user, const DebugSite* detected) {
  int64_t bad;
  if (!heap::debug_find_overwrite(user, &bad)) return false;
  DebugHeader* h = heap::debug_header(user);
  if ((__atomic_fetch_or(&h->flags, heap::kDebugReported, __ATOMIC_ACQ_REL) & heap::kDebugReported) != 0) return true;
  Line l = region::start_debug_report("corrupted data", impl.name.c_str(), user);
  l.add("bad byte at=");
  l.add_signed(bad);
  l.add(":allocated at=");
  add_table_site(l, t, h->flags);
  l.add(":");
  if (detected != nullptr) {
    l.add("detected at=");
    region::add_site(l, *detected);
    l.add(":");
  }
  finish_error(impl, l, user, "corrupted data", false);
  return true;
}

// The user bytes of the debug block in the heap slot at `slot`, or nullptr.
static void* block_in_slot(const RegionImpl& impl, char* slot) {
  uint64_t mark;
  std::memcpy(&mark, slot, sizeof mark);
  char* user = slot + heap::kDebugHeadBytes;
  uint64_t lead = mark ^ kLeadMark ^ secret_of(impl);
  if (lead != 0 && lead < (uint64_t{1} << 32) && lead % 16 == 0 &&
      impl.region.contains(user + lead)) {
    if (classify(impl, user + lead) != DebugState::kNotABlock) return user + lead;
  }
  return classify(impl, user) != DebugState::kNotABlock ? user : nullptr;
}

// The owner's page-heap lock, held across a walk of every slot: its own
// threads repair and hand out blocks under it (a dead client's reclaim on
// the serving thread), and a walk must not read them half written. Other
// processes' allocations are only read (checked, never trusted).
class WalkLock {
 public:
  explicit WalkLock(RegionImpl& impl) : pages_(impl.pages.get()) {
    if (pages_ != nullptr) pages_->lock();
  }
  ~WalkLock() {
    if (pages_ != nullptr) pages_->unlock();
  }
  WalkLock(const WalkLock&) = delete;
  WalkLock& operator=(const WalkLock&) = delete;

 private:
  region::PageHeapOwner* pages_;
};

// Calls fn(user) for each live debug block in the heap's slots, holding
// the owner's walk lock throughout.
template <class Fn>
static void for_each_live_block(RegionImpl& impl, Fn&& fn) {
  WalkLock locked(impl);
  struct Walk {
    const RegionImpl* impl;
    Fn* fn;
  } walk{&impl, &fn};
  heap::region_for_each_slot(
      impl.region, *impl.classes,
      [](void* context, char* slot) {
        auto* w = static_cast<Walk*>(context);
        void* user = block_in_slot(*w->impl, slot);
        if (user != nullptr && classify(*w->impl, user) == DebugState::kLive) (*w->fn)(user);
      },
      &walk);
}

int Region::check_objects() {
  if (impl_->method != Method::kDebug) return -1;
  const heap::SiteTable* table = site_table();
  int bad = 0;
  for_each_live_block(*impl_, [&](void* user) { bad += check_block(*impl_, table, user, nullptr) ? 1 : 0; });
  return bad;
}

void* Region::debug_alloc(size_t size, size_t align, bool zeroed, const void* caller) noexcept {
  heap::SiteTable* t = site_table();
  if (t == nullptr) return nullptr;
  DebugSite site = site_or(caller);
  if (impl_->debug_options.check_each_call && impl_->method == Method::kDebug) (void)check_objects();
  heap::DebugLayout l;
  if (!heap::debug_layout(size, align, &l)) {
    errno = ENOMEM;
    return nullptr;
  }
  heap::ThreadHeap* h = impl_->thread_heap();
  if (h == nullptr) return nullptr;
  void* raw = l.raw_align != 0 ? h->alloc_aligned(l.raw_bytes, l.raw_align) : h->alloc(l.raw_bytes);
  if (raw == nullptr) {
    impl_->event(RegionEvent::kNoMemory, nullptr, "allocation failed");
    return nullptr;
  }
  if (l.lead != 0) {
    uint64_t mark = kLeadMark ^ secret_of(*impl_) ^ l.lead;
    std::memcpy(raw, &mark, sizeof mark);
  }
  void* user = heap::debug_format(raw, l, size, DebugSite{}, secret_of(*impl_), origin_of(*impl_));
  uint32_t index = index_of(*impl_, *t, site);
  heap::debug_header(user)->flags = (index + 1) << kSiteShift;
  heap::site_allocated(*t, index, size);
  if (zeroed) std::memset(user, 0, size);
  if (impl_->method == Method::kDebug && watched(*impl_, user)) alert(*impl_, user, "just allocated", site);
  return user;
}

// Reports a free or resize of p, which is not a live block, and says why.
static void report_not_live(const RegionImpl& impl, const char* call, void* p, const DebugSite& site) {
  const char* what = "unallocated block";
  if (classify(impl, p) == DebugState::kFreed) {
    what = "already freed";
  } else if (impl.region.contains(p) && static_cast<char*>(p) - impl.region.data >= static_cast<ptrdiff_t>(heap::kDebugHeadBytes)) {
    // The heap reuses a freed slot's first bytes (the header's state word)
    // for its free list: its own books say whether the slot is free.
    char* raw = static_cast<char*>(p) - heap::kDebugHeadBytes;
    void* slot = heap::region_object_slot(impl.region, *impl.classes, raw);
    if (slot == raw && region::thread_heap_or_stranger(impl.handle)->validate(raw) == heap::FreeStatus::kDoubleFree) {
      what = "already freed";
    }
  }
  Line l = region::start_debug_report(call, impl.name.c_str(), p);
  l.add(what);
  l.add(":detected at=");
  region::add_site(l, site);
  l.add(":");
  finish_error(impl, l, p, what, true);
}

void Region::debug_free(void* p, const void* caller) noexcept {
  DebugSite site = site_or(caller);
  bool debug = impl_->method == Method::kDebug;
  heap::SiteTable* t = site_table();
  if (debug && impl_->debug_options.check_each_call) (void)check_objects();
  if (t == nullptr || !live_in_heap(*impl_, p)) {
    report_not_live(*impl_, "free error", p, site);
    return;
  }
  if (debug) {
    if (watched(*impl_, p)) alert(*impl_, p, "being freed", site);
    (void)check_block(*impl_, t, p, &site);
  }
  DebugHeader* h = heap::debug_header(p);
  heap::site_freed(*t, (h->flags >> kSiteShift) - 1, h->size);
  void* raw = heap::debug_raw(p);
  heap::debug_mark_freed(p, secret_of(*impl_), origin_of(*impl_));
  (void)region::thread_heap_or_stranger(impl_->handle)->free(raw);
}

void* Region::debug_resize(void* p, size_t size, const void* caller) noexcept {
  DebugSite site = site_or(caller);
  if (!live_in_heap(*impl_, p)) {
    report_not_live(*impl_, "resize error", p, site);
    errno = EINVAL;
    return nullptr;
  }
  if (impl_->method == Method::kDebug && watched(*impl_, p)) alert(*impl_, p, "being resized", site);
  region::CallSiteScope at(site);
  // Always moves, so that a stale pointer to the old place is caught.
  void* q = debug_alloc(size, 16, false, caller);
  if (q == nullptr) return nullptr;
  size_t old = heap::debug_header(p)->size;
  std::memcpy(q, p, old < size ? old : size);
  debug_free(p, caller);
  return q;
}

size_t Region::debug_size(const void* p) const {
  return live_in_heap(*impl_, p) ? heap::debug_header(p)->size : 0;
}

void* Region::debug_addr(const void* p) const {
  char* slot = static_cast<char*>(heap::region_object_start(impl_->region, *impl_->classes, p));
  if (slot == nullptr) return nullptr;
  char* user = static_cast<char*>(block_in_slot(*impl_, slot));
  if (user == nullptr || classify(*impl_, user) != DebugState::kLive) return nullptr;
  const char* c = static_cast<const char*>(p);
  return c >= user && c < user + heap::debug_header(user)->size ? user : nullptr;
}

absl::Status Region::debug_clear() {
  // Collected under the walk lock, freed after it (a free may need the lock).
  std::vector<void*> live;
  for_each_live_block(*impl_, [&](void* user) { live.push_back(user); });
  for (void* user : live) debug_free(user, __builtin_return_address(0));
  return absl::OkStatus();
}

void Region::debug_stats(MethodStats* out) const {
  const heap::SiteTable* t = site_table();
  if (t == nullptr) return;
  // A process killed inside a call can leave the books one object off
  // either way (docs/methods.md): never below zero.
  uint64_t allocated = t->total.n_alloc.load(), freed = t->total.n_free.load();
  out->live_objects = allocated > freed ? allocated - freed : 0;
  int64_t busy = static_cast<int64_t>(t->busy.load());
  out->used_bytes = busy > 0 ? static_cast<uint64_t>(busy) : 0;
}

absl::Status Region::write_profile(int fd) const {
  if (impl_->method != Method::kDebug && impl_->method != Method::kProfile) {
    return absl::FailedPreconditionError(absl::StrCat(impl_->name, ": the profile is the debug and profile methods'; ",
                                                      "this region's method is ", method_name(impl_->method)));
  }
  const heap::SiteTable* t = site_table();
  if (t == nullptr) return absl::ResourceExhaustedError(absl::StrCat(impl_->name, ": ", std::strerror(errno)));
  // The summary's form is the private method's (region/profile_sites.h):
  // the shared table's counts are copied into one.
  auto sites = std::make_unique<region::ProfileSites>();
  // The names copied out (the summary keeps pointers to them), each ended
  // within its slot whatever another process wrote there.
  std::vector<std::array<char, sizeof(heap::SharedSite::text)>> names(heap::SiteTable::kSlots);
  auto counts_of = [](const heap::SharedSiteCounts& c) {
    region::SiteCounts s;
    s.n_alloc = c.n_alloc.load(), s.n_free = c.n_free.load(), s.s_alloc = c.s_alloc.load(), s.s_free = c.s_free.load();
    return s;
  };
  for (uint32_t i = 0; i <= heap::SiteTable::kSlots; ++i) {
    const char* text;
    uint32_t line;
    bool is_pc;
    uint32_t index = region::ProfileSites::kOther;
    if (heap::site_name(*t, i, &text, &line, &is_pc)) {
      std::memcpy(names[i].data(), text, names[i].size() - 1);
      names[i].back() = '\0';
      const char* name = names[i].data();
      index = is_pc ? sites->index_of_pc_text(name) : sites->index_of(DebugSite{name, line, nullptr});
    } else if (i < heap::SiteTable::kSlots && t->slot[i].key.load() == 0) {
      continue;
    }
    sites->add_site_counts(index, counts_of(t->slot[i].counts));
  }
  sites->set_busy(t->busy.load(), t->max_busy.load());
  sites->write_summary(fd, impl_->name.c_str(), impl_->region.header->page_heap.in_use_pages * heap::kPageSize);
  return absl::OkStatus();
}

}  // namespace memd
