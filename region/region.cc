// memd::Region: creating, opening, attaching and closing regions, and the
// process-local table of open regions (region_calls.cc has the calls on an
// open region, region_roots.cc the named roots).
#include "region/region.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "region/arena.h"
#include "region/options.h"
#include "region/region_allocator.h"
#include "region/region_impl.h"
#include "heap/inspect.h"
#include "heap/recovery.h"
#include "heap/region_format.h"
#include "heap/region_upgrade.h"

#if defined(MEMD_SANITIZER_ADDRESS)
#include <sanitizer/asan_interface.h>
#endif

namespace memd {
namespace {

using disciplines::DisciplineKind;
using disciplines::SharedSource;

// The disciplines' own numbers are the region's (and so the wire's).
static_assert(static_cast<uint32_t>(DisciplineKind::kShm) == static_cast<uint32_t>(Discipline::kShm));
static_assert(static_cast<uint32_t>(DisciplineKind::kFile) == static_cast<uint32_t>(Discipline::kFile));
static_assert(static_cast<uint32_t>(DisciplineKind::kPmem) == static_cast<uint32_t>(Discipline::kPmem));
DisciplineKind kind_of(Discipline d) { return static_cast<DisciplineKind>(d); }

// A source's events are the region's, number for number.
static_assert(static_cast<uint32_t>(disciplines::SourceEvent::kNoMemory) == static_cast<uint32_t>(RegionEvent::kNoMemory));
static_assert(static_cast<uint32_t>(disciplines::SourceEvent::kBadAddress) ==
              static_cast<uint32_t>(RegionEvent::kBadAddress));
static_assert(static_cast<uint32_t>(disciplines::SourceEvent::kOpen) == static_cast<uint32_t>(RegionEvent::kOpen));
static_assert(static_cast<uint32_t>(disciplines::SourceEvent::kClose) == static_cast<uint32_t>(RegionEvent::kClose));

absl::Status check_name(std::string_view name, Discipline d) {
  if (d != Discipline::kShm && d != Discipline::kFile && d != Discipline::kPmem) {
    return absl::InvalidArgumentError(absl::StrCat("unknown discipline ", static_cast<uint32_t>(d)));
  }
  return d == Discipline::kShm ? disciplines::validate_region_name(name) : disciplines::validate_path(name);
}

// Where a region prefers to live: the same address in every process, so that
// raw pointers libstdc++'s node containers keep inside it stay valid. A
// range far from where the kernel puts heaps, stacks and libraries, chosen
// by the name so that regions rarely collide.
// 32 to 80 TiB: above AddressSanitizer's shadow, below where position-
// independent executables (85 TiB) and the mmap area (near 128 TiB) go. One
// slot of 64 GiB per name hash.
void* preferred_address(std::string_view name) {
#if defined(MEMD_SANITIZER_THREAD)
  // ThreadSanitizer keeps its shadow there and aborts on any mapping it did
  // not expect: let the kernel choose (processes then agree less often).
  (void)name;
  return nullptr;
#else
  uint64_t h = 1469598103934665603ull;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return reinterpret_cast<void*>(uintptr_t{0x200000000000} + (h % 768) * (uintptr_t{1} << 36));
#endif
}

void forward_source_event(void* context, const disciplines::SourceEventInfo& info) {
  auto* impl = static_cast<RegionImpl*>(context);
  RegionEvent e = static_cast<RegionEvent>(info.event);
  impl->event(e, impl->source && impl->source->base() ? impl->source->base() + info.offset : nullptr, info.what);
}

// Where a region prefers to be mapped, and how much address space it takes.
struct MapPlan {
  uint64_t preferred_base = 0;
  uint64_t reservation = 0;  // the whole region, however long its object is now
  uint64_t tables = 0;       // the bytes before its first data page
};

// Reads and validates the header of an object before mapping it. A region
// of an older format is accepted only by an owner (`as_owner`), which
// upgrades it once mapped.
absl::StatusOr<MapPlan> read_header(const SharedSource& source, Discipline d, Method m, bool as_owner,
                                    Method* method) {
  alignas(heap::RegionHeader) unsigned char bytes[sizeof(heap::RegionHeader)] = {};
  const auto& h = *reinterpret_cast<const heap::RegionHeader*>(bytes);
  size_t len = source.length();
  if (len >= sizeof bytes) {
    if (absl::Status s = source.read(0, bytes, sizeof bytes); !s.ok()) return s;
  }
  char why[200];
  heap::FormatError e = heap::region_validate(h, len, why, sizeof why);
  std::string msg = absl::StrCat(source.name(), ": ", why);
  switch (e) {
    case heap::FormatError::kOk:
      break;
    case heap::FormatError::kUpgradable:
      if (as_owner) break;
      return absl::FailedPreconditionError(msg);
    case heap::FormatError::kVersion:
    case heap::FormatError::kPageSize:
    case heap::FormatError::kIncompatible:
      return absl::FailedPreconditionError(msg);
    case heap::FormatError::kNotARegion:
      return absl::InvalidArgumentError(msg);
    default:
      return absl::DataLossError(msg);
  }
  // A file made as kFile may be opened as kPmem and back: both are files.
  bool is_shm = d == Discipline::kShm, made_shm = h.discipline == static_cast<uint32_t>(Discipline::kShm);
  if (is_shm != made_shm) {
    return absl::InvalidArgumentError(absl::StrCat(source.name(), ": made with discipline ", h.discipline));
  }
  std::optional<Method> made = method_from_number(h.method);
  if (!made || *made == Method{}) {
    return absl::DataLossError(absl::StrCat(source.name(), ": the header names no method (", h.method, ")"));
  }
  if (m != Method{} && *made != m) {
    return absl::FailedPreconditionError(absl::StrCat(source.name(), ": managed by method ", method_name(*made),
                                                      ", asked for method ", method_name(m)));
  }
  *method = *made;
  return MapPlan{h.preferred_base, h.total_bytes, h.data_offset};
}

// The heap's view of a freshly mapped region. In AddressSanitizer builds the
// page-heap owner poisons the pages it holds free, in its own process only;
// a forked child that maps the region where its parent had it would inherit
// that poison for pages it is leased now. A new mapping starts clean.
heap::Region attach_view(const SharedSource& source) {
#if defined(MEMD_SANITIZER_ADDRESS)
  ASAN_UNPOISON_MEMORY_REGION(source.base(), source.reserved_bytes());
#endif
  return heap::Region::attach(source.base());
}

absl::Status attach_threads(RegionImpl* impl, heap::BlockSource* source, uint32_t holder);

// A client's side: blocks come through the channel under `lease`.
absl::Status start_leasing(RegionImpl* r, const region::ClientLease& lease) {
  r->lease = lease;
  r->leased = std::make_unique<region::LeasedBlocks>();
  r->leased->init(r->region, r->channel.get(), r->lease);
  if (absl::Status s = attach_threads(r, r->leased.get(), r->lease.holder); !s.ok()) return s;
  r->pool.stranger()->set_claim_id(lease.stash);
  return absl::OkStatus();
}

absl::Status attach_threads(RegionImpl* impl, heap::BlockSource* source, uint32_t holder) {
  impl->classes = std::make_unique<heap::SizeClasses>(impl->region.header->params);
  source = impl->prefault.wrap(region::prefault_enabled(), source, impl->region, impl->classes.get());
  if (!impl->pool.init(impl->region, impl->classes.get(), source, holder)) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot map thread heaps: ", std::strerror(errno)));
  }
  if (!region::register_host(&impl->pool, &impl->handle)) {
    return absl::ResourceExhaustedError("too many heaps and regions open in this process");
  }
  impl->registered = true;
  impl->refresh_data_plane();
  return absl::OkStatus();
}

// Becomes the owner of a mapped, validated region: recovers it (always: it
// rebuilds the derived state, and after a crash repairs it), then marks it open.
// With `kept` null, a live client of the previous owner makes this fail;
// otherwise its lease is kept (and listed).
absl::Status take_ownership(RegionImpl* impl, bool allocates, std::vector<Region::KeptLease>* kept = nullptr) {
  heap::RegionHeader& h = *impl->region.header;
  bool clean = h.clean_close.load(std::memory_order_acquire) == 1;
  // Clients of an owner that crashed may still be running on their blocks;
  // recovering now would hand those blocks out again under them. A process
  // is the same one only if its start time matches too (pids are reused).
  std::vector<uint8_t> live(impl->region.max_clients, 0);
  for (uint32_t i = 0; i < impl->region.max_clients; ++i) {
    const heap::LeaseSlot& l = impl->region.leases[i];
    if (l.state.load(std::memory_order_acquire) != heap::LeaseState::kActive || l.start_time == 0) continue;
    if (region::process_start_time(l.pid) != l.start_time) continue;
    if (kept == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          impl->name, ": a client of the previous owner is still running (pid ", l.pid,
          "); it must detach or exit before the region is recovered"));
    }
    live[i] = 1;
    kept->push_back(Region::KeptLease{i, l.pid, l.start_time});
  }
  impl->pages = std::make_unique<region::PageHeapOwner>();
  impl->pages->init(impl->source.get(), impl->region);
  heap::RecoveryReport report;
  std::vector<heap::PageIndex> keep;
  heap::region_recover(impl->region, impl->pages->classes(), *impl->source,
                       [&](heap::PageIndex b) { keep.push_back(b); }, &report, live.data());
  for (heap::PageIndex b : keep) impl->pages->abandon(b);
  // Roots left half made by a crash: their objects are lost, the names free;
  // but not one a client that outlived the previous owner is making now.
  impl->settle_roots(std::find(live.begin(), live.end(), 1) != live.end());
  // Pool objects the threads of dead processes held in their caches: every
  // owner slot recovery closed (those of live clients stay theirs).
  impl->return_pool_caches(
      [&](uint32_t slot) { return impl->region.slots[slot].in_use.load(std::memory_order_acquire) == 0; });
  // Publishes a dead process had begun are finished; its reservations
  // become orphans, freed once the region has a heap to free them with,
  // if the recovered heap holds their objects live (the descriptors alone
  // say: every block recovered is ownerless now).
  impl->settle_publish_log(
      [&](uint32_t holder) { return !(holder >= 1 && holder - 1 < impl->region.max_clients && live[holder - 1] != 0); },
      [&](uint64_t object) {
        return object < impl->region.data_bytes &&
               heap::region_object_bytes(impl->region, impl->pages->classes(), impl->region.data + object) != 0;
      });
  if (!clean) {
    h.recoveries += 1;
    h.leaked_objects += report.leaked_objects;
  }
  h.owner_pid = getpid();
  h.generation.fetch_add(1);
  h.clean_close.store(0, std::memory_order_release);
  impl->service = std::make_unique<region::LeaseService>(impl->pages.get());
  impl->service->set_before_reclaim([impl](uint32_t holder) {
    impl->return_pool_caches([&](uint32_t slot) {
      return impl->region.slots[slot].in_use.load(std::memory_order_acquire) == holder;
    });
    impl->settle_publish_log([&](uint32_t h) { return h == holder; });
  });
  impl->service->rebuild_ledger();
  impl->keep_header_copy();
  if (!allocates) {
    impl->classes = std::make_unique<heap::SizeClasses>(impl->region.header->params);
    return absl::OkStatus();
  }
  return attach_threads(impl, impl->pages.get(), heap::kProcessHolder);
}

}  // namespace

void RegionImpl::detach_all() {
  if (registered) {
    // Threads that used the region and are still alive lose their heaps;
    // the contract is that none of them uses the region any more.
    region::detach_thread_heap(handle);
    pool.abandon_all_heaps();
    region::unregister_arena(handle);
    registered = false;
    refresh_data_plane();
  }
  if (leased) leased->return_all();
}

// --- which Region maps which base, for RegionAllocator ---

namespace {
constexpr int kMaxMapped = 64;
struct Mapped {
  std::atomic<const void*> base{nullptr};
  std::atomic<Region*> region{nullptr};
};
Mapped mapped[kMaxMapped];
std::mutex mapped_lock;

// A forked child has none of its parent's Region objects in use (it must
// open or attach its own), so it forgets them all.
void forget_all_in_child() {
  for (Mapped& m : mapped) {
    m.base.store(nullptr);
    m.region.store(nullptr);
  }
}

void remember(const void* base, Region* r) {
  static const bool hooked = [] { return pthread_atfork(nullptr, nullptr, forget_all_in_child) == 0; }();
  (void)hooked;
  std::lock_guard<std::mutex> g(mapped_lock);
  for (Mapped& m : mapped) {
    if (m.base.load() != nullptr) continue;
    m.region.store(r);
    m.base.store(base, std::memory_order_release);
    return;
  }
}

void forget(Region* r) {
  std::lock_guard<std::mutex> g(mapped_lock);
  for (Mapped& m : mapped) {
    if (m.region.load() != r) continue;
    m.base.store(nullptr, std::memory_order_release);
    m.region.store(nullptr);
  }
}
}  // namespace

Region* region_at(const void* base) noexcept {
  for (Mapped& m : mapped) {
    if (m.base.load(std::memory_order_acquire) == base) return m.region.load();
  }
  return nullptr;
}

Region::Region(std::unique_ptr<RegionImpl> impl) : impl_(std::move(impl)) {
  remember(impl_->region.base, this);
  // Reservations of processes that died: freed by the first process able to.
  if (impl_->registered && !impl_->read_only && impl_->method == Method::kBest) free_orphaned_reservations();
}

Region::~Region() {
  forget(this);
  RegionImpl& r = *impl_;
  // Close is announced here, once, while everything is still in place; the
  // discipline's own close event would come too late to reach the handler.
  r.event(RegionEvent::kClose, r.region.base, "region closing");
  r.source->set_event_handler(nullptr, nullptr);
#if defined(MEMD_SANITIZER_ADDRESS)
  // The poison this process's page-heap owner put on free pages must not
  // outlive the mapping: whatever is mapped at these addresses next (a
  // region that libpmem places anywhere, any anonymous mmap) would inherit
  // it. Lifted on the way out, after the last release below may have
  // poisoned more; shadow memory only, the region's pages are not touched.
  struct Unpoison {
    const SharedSource* source;
    ~Unpoison() {
      if (source->base() != nullptr) ASAN_UNPOISON_MEMORY_REGION(source->base(), source->reserved_bytes());
    }
  } unpoison_on_exit{r.source.get()};
#endif
  if (r.read_only || r.damaged) return;
  r.server.reset();  // no new leases
  r.detach_all();
  if (r.owner()) {
    // Everything is on disk before the region says it was closed cleanly.
    r.source->persist(0, r.written_span());
    r.region.header->clean_close.store(1, std::memory_order_release);
    r.source->persist(0, heap::kPageSize);
  }
  r.channel.reset();  // the owner sees the connection end
}

absl::StatusOr<std::unique_ptr<Region>> Region::create(std::string_view name, const RegionOptions& options) {
  if (absl::Status s = check_name(name, options.discipline); !s.ok()) return s;
  std::optional<Method> method = method_from_number(static_cast<uint32_t>(options.method));
  if (!method || *method == Method{}) {
    return absl::InvalidArgumentError(absl::StrCat("unknown method ", static_cast<uint32_t>(options.method)));
  }
  if (!heap::params_valid(options.params)) return absl::InvalidArgumentError("invalid heap parameters");
  if (options.max_threads == 0 || options.max_threads > heap::kMaxOwnerSlots - 1 || options.max_clients == 0 ||
      options.max_clients >= heap::kProcessHolder || options.max_roots == 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_threads must be 1..", heap::kMaxOwnerSlots - 1,
                                                   ", max_clients 1..", heap::kProcessHolder - 1,
                                                   ", max_roots at least 1"));
  }
  size_t bytes = (options.max_bytes + heap::kPageSize - 1) & ~(heap::kPageSize - 1);
  heap::FormatSpec spec;
  spec.params = options.params;
  spec.max_owners = options.max_threads + options.max_clients;  // + one stash per client
  spec.max_clients = options.max_clients;
  spec.max_roots = options.max_roots;
  spec.method = static_cast<uint32_t>(options.method);
  spec.discipline = static_cast<uint32_t>(options.discipline);
  spec.secret = heap::random_secret();
  if (heap::region_max_pages(bytes, spec) < 64) {
    return absl::InvalidArgumentError(absl::StrCat("max_bytes ", options.max_bytes,
                                                   " leaves no room for data pages after the tables"));
  }
  auto impl = std::make_unique<RegionImpl>();
  impl->name = std::string(name);
  impl->discipline = options.discipline;
  impl->method = options.method;
  impl->handler = options.event_handler;
  impl->handler_context = options.event_context;
  disciplines::SharedSourceOptions so;
  so.length = bytes;
  // The object starts as long as the tables and grows as the heap uses pages.
  so.initial_length = heap::region_geometry(bytes, spec).data_offset;
  so.create = true;
  so.mode = options.mode;
  absl::StatusOr<std::unique_ptr<SharedSource>> src = SharedSource::open(kind_of(options.discipline), name, so);
  if (!src.ok()) return src.status();
  impl->source = std::move(*src);
  impl->source->set_event_handler(forward_source_event, impl.get());
  auto fail = [&](absl::Status s) {
    impl->source.reset();
    (void)disciplines::remove_shared(kind_of(options.discipline), name);
    return s;
  };
  if (absl::Status s = impl->source->lock_owner(); !s.ok()) return fail(s);
  if (absl::Status s = impl->source->map(preferred_address(name), bytes); !s.ok()) return fail(s);
  if (!heap::region_format(*impl->source, spec)) {
    return fail(absl::ResourceExhaustedError(absl::StrCat("cannot format the region: ", std::strerror(errno))));
  }
  impl->region = attach_view(*impl->source);
  // A new region has nothing to recover: not a crash to count.
  impl->region.header->clean_close.store(1, std::memory_order_release);
  if (absl::Status s = take_ownership(impl.get(), options.owner_allocates); !s.ok()) return fail(s);
  return std::unique_ptr<Region>(new Region(std::move(impl)));
}

namespace {

absl::StatusOr<std::unique_ptr<RegionImpl>> map_existing(std::string_view name, Discipline d, Method m,
                                                         bool read_only, bool as_owner, MapPlan* plan) {
  if (absl::Status s = check_name(name, d); !s.ok()) return s;
  auto impl = std::make_unique<RegionImpl>();
  impl->name = std::string(name);
  impl->discipline = d;
  impl->read_only = read_only;
  disciplines::SharedSourceOptions so;
  so.read_only = read_only;
  absl::StatusOr<std::unique_ptr<SharedSource>> src = SharedSource::open(kind_of(d), name, so);
  if (!src.ok()) return src.status();
  impl->source = std::move(*src);
  absl::StatusOr<MapPlan> read = read_header(*impl->source, d, m, as_owner, &impl->method);
  if (!read.ok()) return read.status();
  *plan = *read;
  impl->source->set_event_handler(forward_source_event, impl.get());
  return impl;
}

// Maps an existing region over its whole reservation, at its preferred
// base if free. A process that is not the owner relies only on the tables
// being there: the owner grows and shrinks the object over data pages.
absl::Status map_planned(RegionImpl* r, const MapPlan& plan) {
  size_t reservation = (plan.reservation + heap::kPageSize - 1) & ~(heap::kPageSize - 1);
  if (absl::Status s = r->source->map(reinterpret_cast<void*>(plan.preferred_base), reservation); !s.ok()) return s;
  r->source->set_required_length(plan.tables);
  return absl::OkStatus();
}

// The owner's first look at the object's length against the page heap's
// committed mark. Pages past the end were handed out after the last durable
// point (a power cut can undo a growth that never reached the disk, while
// descriptors written later did), or the object was cut while closed. Either
// way what lay there is gone: the committed mark comes down to the end, the
// recovery that follows frees every block reaching past it, and the objects
// lost are counted as a crash's are (HeaderFacts::leaked_objects). A clean
// close cannot tell: after a power cut the header may be older than the
// descriptors.
void fit_to_backing(RegionImpl* r) {
  heap::Region& g = r->region;
  const size_t tables = static_cast<size_t>(g.data - g.base);
  const size_t length = r->source->known_length();
  r->source->set_required_length(std::max(tables, length));
  const uint32_t backed = static_cast<uint32_t>(
      std::min<size_t>((length - std::min(length, tables)) >> heap::kPageShift, g.page_limit()));
  const uint32_t committed = g.committed_pages();
  if (committed <= backed) return;
  // Objects of the blocks that reach past the end, for the count: each
  // block's first page says how many it held (its descriptor is in the
  // tables, which the object still holds).
  uint64_t lost = 0;
  for (uint32_t p = 0; p < committed; ++p) {
    heap::PageDesc d = g.page(heap::PageIndex{p});
    if (d.block != p) continue;
    const heap::BlockDesc& b = g.block(heap::PageIndex{p});
    if (d.kind == heap::PageKind::kHuge && uint64_t{p} + b.pages.value > backed) lost += 1;
    if ((d.kind == heap::PageKind::kSegregated || d.kind == heap::PageKind::kLarge) &&
        uint64_t{p} + b.pages.value > backed) {
      lost += std::min<uint32_t>(b.used, heap::kMaxBlockPages * heap::kPageSize / 8);
    }
  }
  heap::RegionHeader& h = *g.header;
  h.leaked_objects += lost;
  h.page_heap.committed_pages.store(backed, std::memory_order_release);
}

}  // namespace

namespace {

// Brings a region of an older format (accepted by read_header for an owner)
// to this build's, in place, before recovery reads it. Only with the region
// to itself: a client of the previous owner that still runs would go on
// writing the old format.
absl::Status upgrade_format(RegionImpl* r) {
  heap::RegionHeader& h = *r->region.header;
  if (h.version == heap::kFormatVersion) return absl::OkStatus();
  for (uint32_t i = 0; i < r->region.max_clients; ++i) {
    const heap::LeaseSlot& l = r->region.leases[i];
    if (l.state.load(std::memory_order_acquire) != heap::LeaseState::kActive || l.start_time == 0) continue;
    if (region::process_start_time(l.pid) != l.start_time) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        r->name, ": region format version ", h.version, " needs an upgrade to version ", heap::kFormatVersion,
        ", which cannot be made while a client of the previous owner still runs on it (pid ", l.pid, ")"));
  }
  uint64_t leaked = 0;
  if (!heap::region_upgrade(r->region, *r->source, &leaked)) {
    return absl::FailedPreconditionError(absl::StrCat(r->name, ": cannot upgrade region format version ", h.version));
  }
  h.leaked_objects += leaked;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RegionImpl>> open_as_owner(std::string_view name, Discipline discipline,
                                                          Method method, std::vector<Region::KeptLease>* kept) {
  MapPlan plan;
  absl::StatusOr<std::unique_ptr<RegionImpl>> impl = map_existing(name, discipline, method, false, true, &plan);
  if (!impl.ok()) return impl.status();
  RegionImpl* r = impl->get();
  if (absl::Status s = r->source->lock_owner(); !s.ok()) return s;
  if (absl::Status s = map_planned(r, plan); !s.ok()) return s;
  r->region = attach_view(*r->source);
  if (absl::Status s = upgrade_format(r); !s.ok()) return s;
  fit_to_backing(r);
  // Clients of a previous owner are kept only by an owner that serves them
  // (the daemon), which does not allocate itself.
  if (absl::Status s = take_ownership(r, kept == nullptr, kept); !s.ok()) return s;
  return impl;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Region>> Region::open(std::string_view name, Discipline discipline,
                                                     Method method) {
  absl::StatusOr<std::unique_ptr<RegionImpl>> impl = open_as_owner(name, discipline, method, nullptr);
  if (!impl.ok()) return impl.status();
  return std::unique_ptr<Region>(new Region(std::move(*impl)));
}

absl::StatusOr<std::unique_ptr<Region>> Region::open_keeping_clients(std::string_view name, Discipline discipline,
                                                                     Method method, std::vector<KeptLease>* kept) {
  std::vector<KeptLease> none;
  absl::StatusOr<std::unique_ptr<RegionImpl>> impl =
      open_as_owner(name, discipline, method, kept != nullptr ? kept : &none);
  if (!impl.ok()) return impl.status();
  return std::unique_ptr<Region>(new Region(std::move(*impl)));
}

region::LeaseService* Region::lease_service() const { return impl_->service.get(); }

absl::StatusOr<std::unique_ptr<Region>> Region::attach(std::string_view name, Discipline discipline,
                                                       std::string_view owner_socket, bool read_only,
                                                       Method method) {
  MapPlan plan;
  absl::StatusOr<std::unique_ptr<RegionImpl>> impl =
      map_existing(name, discipline, method, read_only, false, &plan);
  if (!impl.ok()) return impl.status();
  RegionImpl* r = impl->get();
  if (absl::Status s = map_planned(r, plan); !s.ok()) return s;
  r->region = attach_view(*r->source);
  if (read_only) {
    r->classes = std::make_unique<heap::SizeClasses>(r->region.header->params);
    return std::unique_ptr<Region>(new Region(std::move(*impl)));
  }
  absl::StatusOr<std::unique_ptr<region::SocketLeaseChannel>> ch = region::SocketLeaseChannel::connect(owner_socket);
  if (!ch.ok()) return ch.status();
  r->channel = std::move(*ch);
  absl::StatusOr<region::ClientLease> lease = r->channel->hello(getpid(), region::process_start_time(getpid()));
  if (!lease.ok()) return lease.status();
  if (absl::Status s = start_leasing(r, *lease); !s.ok()) return s;
  return std::unique_ptr<Region>(new Region(std::move(*impl)));
}

absl::StatusOr<std::unique_ptr<Region>> Region::inspect(std::string_view name, Discipline discipline) {
  MapPlan plan;
  absl::StatusOr<std::unique_ptr<RegionImpl>> impl = map_existing(name, discipline, Method{}, true, false, &plan);
  if (!impl.ok()) return impl.status();
  RegionImpl* r = impl->get();
  if (absl::Status s = r->source->lock_shared(); !s.ok()) return s;
  if (absl::Status s = map_planned(r, plan); !s.ok()) return s;
  r->region = attach_view(*r->source);
  r->classes = std::make_unique<heap::SizeClasses>(r->region.header->params);
  return std::unique_ptr<Region>(new Region(std::move(*impl)));
}

absl::StatusOr<std::unique_ptr<Region>> Region::attach_leased(std::string_view object, Discipline discipline,
                                                              Method method,
                                                              std::unique_ptr<region::LeaseChannel> channel,
                                                              const region::ClientLease& lease) {
  MapPlan plan;
  absl::StatusOr<std::unique_ptr<RegionImpl>> impl = map_existing(object, discipline, method, false, false, &plan);
  if (!impl.ok()) return impl.status();
  RegionImpl* r = impl->get();
  r->channel = std::move(channel);  // from here on, failing returns the lease (the channel's end)
  if (absl::Status s = map_planned(r, plan); !s.ok()) return s;
  r->region = attach_view(*r->source);
  if (absl::Status s = start_leasing(r, lease); !s.ok()) return s;
  return std::unique_ptr<Region>(new Region(std::move(*impl)));
}

absl::Status Region::remove(std::string_view name, Discipline discipline) {
  if (absl::Status s = check_name(name, discipline); !s.ok()) return s;
  return disciplines::remove_shared(kind_of(discipline), name);
}

absl::Status Region::serve(std::string_view path) {
  if (!impl_->owner()) return absl::FailedPreconditionError("only the region's owner serves leases");
  if (impl_->server) return absl::FailedPreconditionError("already serving");
  absl::StatusOr<std::unique_ptr<region::SocketLeaseServer>> s =
      region::SocketLeaseServer::start(path, impl_->service.get(), [this] { return repair_backing(); });
  if (!s.ok()) return s.status();
  impl_->server = std::move(*s);
  return absl::OkStatus();
}

}  // namespace memd
