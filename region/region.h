// memd::Region, a heap in shared or persistent memory: Vmalloc's region
// (a discipline that says where memory comes from, a method that says how it
// is managed) with the Vam heap inside, mapped by several processes at once.
//
// One process opens a region as its *owner*: it alone writes page-level
// metadata (page descriptors, free page runs, the lease table) and leases
// blocks to clients. Every process, the owner included, allocates from the
// blocks leased to it without locks and frees any object of the region. A
// client process attaches through the owner's lease channel (a Unix socket
// here; the daemon's gRPC service later). A client killed at any instant
// leaves its blocks abandoned, never corrupt: the owner reclaims or hands them
// to the next client.
//
// Data-plane calls (alloc, free, resize) report failure as nullptr and errno;
// everything else returns absl::Status.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "heap/counter_snapshot.h"
#include "heap/params.h"
#include "heap/region_stats.h"

namespace memd {

namespace detail {
// A name for T that is the same in every function that asks (the hash of a
// root's type must not depend on which template asked).
template <class T>
constexpr const char* type_name() { return __PRETTY_FUNCTION__; }
}  // namespace detail

// Where a region's memory comes from.
enum class Discipline : uint32_t {
  kShm = 1,   // a POSIX shared memory object: shared, gone at reboot
  kFile = 2,  // a mapped file: shared and persistent
  kPmem = 3,  // a file mapped through PMDK libpmem (DAX or a regular file system)
};

// How the region's memory is managed (Vmalloc's methods; docs/methods.md).
enum class Method : uint32_t {
  kBest = 1,  // the Vam heap: any size, any order of frees
  kPool = 2,  // objects of one size (fixed by the first allocation after
              // creation or clear), no per-object header, lock-free bitmaps
  kLast = 3,  // bump allocation: only the most recent object may be freed
              // or resized in place; clear() frees everything at once
  kDebug = 4,    // best, with guards around each object checked at free,
                 // resize and on demand, and reports naming the object, the
                 // bad byte and the call sites (region/region_debug.cc)
  kProfile = 5,  // best, counting bytes and objects per call site in the
                 // region (heap/site_table.h), every process into one table
};

// The only place a number becomes a Discipline or a Method (a number from
// the wire, the C API or the daemon's catalog, whose enums are pinned to
// these by static_asserts: proto/wire_enums.h, c_region_api.cc). Zero is
// "unspecified" (Discipline{}, Method{}); a number that names none is nullopt.
std::optional<Discipline> discipline_from_number(uint64_t n);
std::optional<Method> method_from_number(uint64_t n);
// "best", "pool", "last", "debug", "profile" ("unspecified" for Method{}); "shm", "file", "pmem"
// ("?" for Discipline{}): for messages.
const char* method_name(Method m);
const char* discipline_name(Discipline d);

// What a pool or last region's method holds (Region::method_stats).
struct MethodStats {
  Method method = Method::kBest;
  uint64_t object_size = 0;    // pool: the fixed request size (0 until the first allocation)
  uint64_t chunks = 0;         // chunks of the region's best heap the method took
  uint64_t chunk_bytes = 0;
  uint64_t live_objects = 0;   // pool: allocated and not freed
  uint64_t capacity = 0;       // pool: objects the chunks hold
  uint64_t used_bytes = 0;     // last: bytes up to the top (earlier chunks counted whole)
  uint64_t ignored_frees = 0;  // last: frees of an object that was not the most recent
};

// Vmalloc's exception events, delivered to the region's handler.
enum class RegionEvent : uint32_t {
  kNoMemory = 1,    // the backing store is full or the reservation is used up
  kBadAddress = 2,  // a pointer that is not a live object of the region was freed
  kOpen = 3,        // the region was mapped
  kClose = 4,       // the region is being unmapped
};
// Called on the data path: it must not call back into the region.
using RegionEventHandler = void (*)(void* context, RegionEvent event, const void* address,
                                    const char* what);

struct RegionOptions {
  Discipline discipline = Discipline::kShm;
  Method method = Method::kBest;
  // Fixed at creation: the address space every process reserves and the
  // largest the backing may grow to. Backing is allocated as pages are used.
  size_t max_bytes = size_t{1} << 30;
  uint32_t max_threads = 1024;  // thread heaps of all processes at once
  uint32_t max_clients = 64;    // processes attached at once
  uint32_t max_roots = 256;     // named roots
  mode_t mode = 0600;           // permissions of a created object
  // Whether the owner allocates in the region itself. An owner that only
  // serves leases to other processes (the daemon) says false: it then maps
  // no thread heaps and takes no slot of the process's heap table, so it
  // may own as many regions as it likes; alloc on it fails with EPERM.
  bool owner_allocates = true;
  heap::HeapParams params;
  // Exception events from the start (kOpen included); set_event_handler
  // changes it later.
  RegionEventHandler event_handler = nullptr;
  void* event_context = nullptr;
};

// A named root, as listed.
struct RootInfo {
  std::string name;
  uint64_t offset = 0;  // of the object, from the start of the data pages
  uint64_t size = 0;    // bytes requested at construction
  uint64_t type = 0;    // a hash of the type name given at construction
};

class RegionImpl;
namespace heap {
struct SiteTable;
class ThreadHeap;
}  // namespace heap
namespace region {
class LeaseChannel;
class LeaseService;
struct ClientLease;
struct PublishEntry;
}  // namespace region

class Region {
 public:
  // Creates a new region named `name` (a shm object name: letters, digits,
  // '.', '_', '-'; or a file path) and opens it as its owner. ALREADY_EXISTS
  // if it exists.
  static absl::StatusOr<std::unique_ptr<Region>> create(std::string_view name,
                                                        const RegionOptions& options);
  // A region of this process only, for a private heap under any method:
  // memory no other process can open or attach (options.discipline is
  // ignored: shm, its name removed at once), gone when the process ends.
  static absl::StatusOr<std::unique_ptr<Region>> create_private(const RegionOptions& options);
  // Opens an existing region as its owner: validates its format and, if the
  // last owner did not close it cleanly, recovers it (everything derived is
  // rebuilt; objects in flight at the crash may leak, nothing else).
  // `method` must be the one the region was created with (Method{}: any,
  // as the region says); another is FAILED_PRECONDITION naming both.
  static absl::StatusOr<std::unique_ptr<Region>> open(std::string_view name, Discipline discipline,
                                                      Method method = Method{});
  // A lease of a client process that outlived the region's previous owner.
  struct KeptLease {
    uint32_t slot = 0;
    pid_t pid = 0;
    uint64_t start_time = 0;
  };
  // Like open(), for an owner that serves clients which may outlive it (the
  // daemon): clients of the previous owner that still run keep their lease
  // slots and blocks untouched, to resume them with this owner; `kept`
  // lists them. The caller must reclaim each one whose process later exits
  // without resuming (lease_service()->client_gone). The owner only serves
  // leases (RegionOptions::owner_allocates false).
  static absl::StatusOr<std::unique_ptr<Region>> open_keeping_clients(std::string_view name, Discipline discipline,
                                                                      Method method, std::vector<KeptLease>* kept);
  // Attaches to a region through a lease channel already registered with
  // its owner (the daemon client does this after the owner said where the
  // region lives). `object` is the name or path the owner gave.
  static absl::StatusOr<std::unique_ptr<Region>> attach_leased(std::string_view object, Discipline discipline,
                                                               Method method,
                                                               std::unique_ptr<region::LeaseChannel> channel,
                                                               const region::ClientLease& lease);
  // Attaches to a region whose owner serves leases on `owner_socket`.
  // `read_only`: map without write access; alloc and free then fail (EROFS).
  static absl::StatusOr<std::unique_ptr<Region>> attach(std::string_view name, Discipline discipline,
                                                        std::string_view owner_socket,
                                                        bool read_only = false, Method method = Method{});
  // For tools, with the owner stopped: maps the region read-only, under a
  // shared lock that keeps any owner out while the result lives. Reads only
  // (roots, stat, check, facts); alloc and free fail (EROFS). An owner
  // holding it is FAILED_PRECONDITION.
  static absl::StatusOr<std::unique_ptr<Region>> inspect(std::string_view name, Discipline discipline);
  // Deletes a region's backing object. The region must not be open.
  static absl::Status remove(std::string_view name, Discipline discipline);

  ~Region();  // closes: the owner marks a clean close; a client gives its blocks back
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  // Owner only: accepts clients on a Unix socket at `path` (a thread of this
  // process answers them). A client whose connection drops is dead: its
  // blocks are reclaimed.
  absl::Status serve(std::string_view path);

  // By the region's method. A pool region fails (EINVAL) a size other than
  // its fixed one; a last region frees only its most recent object (others
  // wait for clear) and knows only that object's size.
  void* alloc(size_t size) noexcept;
  // alloc for a wrapper's caller: with call-chain pools, the chain starts at
  // `caller` (the wrapper's return address; `caller_cfa`, the wrapper's
  // canonical frame address), not at the wrapper (the C API's entry points).
  void* alloc_as(size_t size, const void* caller, const void* caller_cfa) noexcept;
  void* alloc_aligned(size_t size, size_t align) noexcept;
  void* alloc_zeroed(size_t size) noexcept;
  // A pointer that is not a live object of this region gets a kBadAddress
  // event and a report, and is ignored.
  void free(void* p) noexcept;
  // n objects of `size` into out[0..n), as n calls of alloc would give
  // (best: one class lookup, a block's free list drained in one loop).
  // Returns how many it made; fewer than n only when memory runs out or
  // the method refuses the size (errno says which).
  size_t alloc_batch(size_t n, size_t size, void** out) noexcept;
  // free of each of p[0..n); nullptr entries are skipped.
  void free_batch(void* const* p, size_t n) noexcept;
  // Allocation hints (best; the other methods ignore the hint): an object
  // within `near_bytes` of `hint` when the hint's block, this thread's,
  // has a free one there; else what alloc gives.
  void* alloc_near(size_t size, const void* hint, size_t near_bytes = 4096) noexcept;
  void* resize(void* p, size_t size) noexcept;
  size_t size(const void* p) const;  // usable size of a live object, 0 if not one
  // The start of the live object holding p, or nullptr (Vmalloc's vmaddr).
  // best: walks the block's free lists, exact while no other thread frees
  // into that block; pool and last: p itself if a live object starts there
  // (they keep no map from an object's inner bytes to its start).
  void* addr(const void* p) const;
  // Pool and last: frees every object of the method at once (Vmalloc's
  // vmclear); a pool's next allocation fixes its size anew. No other call
  // on the method's objects may run meanwhile, in any process. Roots are
  // not the method's and stay. FAILED_PRECONDITION for best.
  absl::Status clear();
  MethodStats method_stats() const;

  // The debug and profile methods (docs/methods.md). Their books are in the
  // region: any process may free any object and the reports name the site
  // that allocated it, in whichever process that was. Settings are this
  // process's: `check_each_call` checks every block of the region at every
  // call (Vmalloc's VM_DBCHECK; slow), `abort` aborts at the first error
  // (VM_DBABORT).
  struct DebugOptions {
    bool check_each_call = false;
    bool abort = false;
  };
  void set_debug_options(const DebugOptions& options);
  // Debug: every call of this process that meets `address` reports it;
  // false if the list (16) is full or the method is not debug.
  bool watch(const void* address);
  // Debug: reports each live object whose guards are overwritten (once per
  // object, across processes); returns how many are overwritten now, or -1
  // if the method is not debug.
  int check_objects();
  // Debug and profile: the per-site summary in the Vmalloc paper's form
  // (what memdctl pprof reads) to `fd`. FAILED_PRECONDITION for other methods.
  absl::Status write_profile(int fd) const;

  // Position independence: offsets are the same in every process.
  uint64_t offset_of(const void* p) const;
  void* at(uint64_t offset) const;
  bool contains(const void* p) const;
  char* base() const;
  // Whether this process mapped the region at the address its creator did
  // (node-based libstdc++ containers need that; offset_ptr does not).
  bool at_preferred_address() const;

  // Named roots. find_or_construct is atomic across processes: exactly one
  // caller constructs, every caller gets the same object. It returns
  // nullptr and errno on failure: EINVAL (a bad name, or a root of another
  // type), EROFS (attached read-only), ENOSPC (every root slot taken),
  // ENOMEM, and ETIMEDOUT: the roots lock, which it holds while the
  // constructor runs and which every process's root calls share, has been
  // held by another process for longer than MEMD_ROOTS_LOCK_TIMEOUT_MS
  // (default 10 s; a process stopped inside a constructor keeps it), which
  // is also reported on stderr naming the region.
  template <class T, class... Args>
  T* find_or_construct(std::string_view name, Args&&... args);
  template <class T>
  T* find(std::string_view name) const;  // takes no lock
  // Destroys the object and frees it; false if there is no such root
  // (errno ENOENT) or it cannot be had (errno as for find_or_construct).
  template <class T>
  bool destroy(std::string_view name);
  std::vector<RootInfo> list() const;
  // Roots of plain bytes (the C API's): found, or made as `size` zeroed
  // bytes (*created tells). Another type under the name: nullptr, EINVAL;
  // other failures as for find_or_construct (ETIMEDOUT included).
  void* root_bytes(std::string_view name, size_t size, bool* created);
  void* find_bytes(std::string_view name) const;

  // Makes [p, p + n) durable (msync or a cache flush, by discipline).
  absl::Status persist(const void* p, size_t n);
  // Makes the whole region durable, metadata included.
  absl::Status checkpoint();

  // Failure-atomic publish (best method; docs/region-format.md, "Power
  // loss"). reserve allocates an object that belongs to no one until it is
  // published: if this process dies (or the power goes) first, the object
  // is freed at the region's recovery or the process's reclaim. nullptr
  // with errno: ENOTSUP under another method, EAGAIN when every entry of
  // the region's log holds a reservation, else as alloc.
  void* reserve(size_t size);
  // Makes the reserved object durable with its allocation, then stores
  // `value` into `link` (an 8-byte word of the region's data) durably, as
  // one step: after any crash or power cut, either the link holds `value`
  // and the object is live and intact, or the object is freed (and the
  // link as it was). The reservation ends. InvalidArgument if `object` is
  // no reservation of this process or `link` no word of the region.
  absl::Status publish(void* object, std::atomic<uint64_t>* link, uint64_t value);
  // Several reservations published as one step: after any crash or power
  // cut, either every link holds its value (every object live and intact),
  // or none changed and every object is freed. At most kMaxPublishBatch
  // items, each a distinct reservation of this process into a distinct
  // link; InvalidArgument naming the first that is not, and then nothing
  // is published (the reservations stay).
  struct PublishItem {
    void* object;
    std::atomic<uint64_t>* link;
    uint64_t value;
  };
  static constexpr size_t kMaxPublishBatch = 64;
  absl::Status publish(const PublishItem* items, size_t n);
  // Frees a reservation instead.
  absl::Status cancel(void* object);

  // Gives free memory back: the calling thread's empty blocks, this
  // process's spare blocks, and (owner) every empty page, punched out of the
  // backing object so that its resident and on-disk size follow live data;
  // and the reservations of dead processes (Region::reserve).
  void compact();

  // Verifies every invariant of the region (every page, block and list).
  // Exact while no other thread or process allocates.
  absl::Status check();
  // Owner only: what stays exact while clients allocate: every page
  // descriptor, free run and count, and the inside of every block no thread
  // owns now; *skipped counts the owned blocks whose inside was left out.
  absl::Status check_while_in_use(uint32_t* skipped);
  heap::RegionStats stat();
  // Whether the region's object still backs its whole mapping (DATA_LOSS if
  // it was truncated, or a page fault found no backing). A region that fails
  // this must not be used any more: see disciplines/fault_guard.h.
  absl::Status backing_status() const;
  // backing_status for the region's owner, which serves it: if the header's
  // fields fixed at creation (identity, geometry, classes, parameters) were
  // overwritten by a process that maps the region, they are first written
  // back from the owner's copy, taken when it opened the region (and made
  // durable in a file region); *repaired (if given) says whether they were.
  // What it cannot restore (the lifecycle and page-heap fields, the backing
  // object's length) still fails as in backing_status. Others: backing_status.
  absl::Status repair_backing(bool* repaired = nullptr);
  // For a region whose backing failed: closing it then touches none of its
  // memory (no clean close is marked, so the next open recovers it).
  void mark_damaged();
  // Online growth. A region's backing object starts as long as its tables
  // and grows (the owner lengthens it) as the heap uses pages, up to
  // max_bytes; compact() shrinks it over a free tail. Its length as this
  // process last set or saw it (the owner's is exact).
  uint64_t object_bytes() const;
  // Owner only: asked before the object grows (false refuses: a quota, such
  // as the daemon's bytes per uid) and told after it shrinks. Data-plane:
  // it must not allocate, block, or call into the region.
  using LengthPolicy = bool (*)(void* context, size_t old_length, size_t new_length);
  void set_length_policy(LengthPolicy policy, void* context);
  // What this process's thread heaps did here (telemetry), cumulative.
  heap::CounterSnapshot counters() const;
  // The same, added into *out (a report that sums several sources).
  void add_counters(heap::CounterSnapshot* out) const;
  // Where the data pages start in this process (telemetry names objects by
  // their offset from here).
  const char* data_base() const;

  // A client's side: gives the spare blocks this process leased back to the
  // owner now (the daemon's drain). Nothing for an owner.
  void give_back_spares();
  // In a forked child: maps the region privately (copy on write) over the
  // inherited mapping, so that the child's writes stay its own. False if
  // that failed.
  bool remap_private_in_child();

  void set_event_handler(RegionEventHandler handler, void* context);
  // Call-chain pools (region/chain_pools.h, the DPA paper) for this
  // region's alloc in this process: the small objects of each busy call
  // chain (the caller of alloc, lengthened past wrappers) come from blocks of
  // their own. The best method only; the chains are this process's. Turns
  // the process's chain classifier on with its defaults if it is off. Set
  // it before other threads allocate in the region.
  void set_chain_pools(bool on);

  // Owner only: the service that answers client processes' lease requests.
  region::LeaseService* lease_service() const;

  bool is_owner() const;
  bool read_only() const;
  Discipline discipline() const;
  Method method() const;
  uint64_t generation() const;  // owner opens since creation

  // What a serving owner (the daemon) reads of its region, so that it needs
  // none of the region's internals (region/region_owner_facts.cc).
  struct HeaderFacts {
    uint64_t generation = 0;      // owner opens since creation
    uint64_t recoveries = 0;      // opens that found an unclean close
    uint64_t leaked_objects = 0;  // objects lost to crashes, as recovery counted them
    uint32_t max_clients = 0;     // lease slots
    uint32_t max_pages = 0;       // data pages the reservation can hold
    uint64_t committed_bytes = 0; // data pages backed now
    uint32_t format_version = 0;  // of the region's layout (docs/region-format.md)
    bool clean_close = false;     // the last owner closed it (false: open now, or it crashed)
  };
  HeaderFacts header_facts() const;
  // One client process's lease slot, as the owner keeps it.
  struct LeaseSlotFacts {
    bool active = false;       // a process holds blocks under the slot
    pid_t pid = 0;             // and its identity: pid and start time
    uint64_t start_time = 0;
    uint64_t lease_calls = 0;  // lease requests served under the slot
    uint32_t stash_owner = 0;  // the owner id of the client's spare blocks
  };
  // REQUIRES: slot < header_facts().max_clients.
  LeaseSlotFacts lease_slot(uint32_t slot) const;
  // Bytes of the committed data pages in memory now (mincore).
  uint64_t resident_bytes() const;
  // Whether a live object starts `offset` bytes into the data pages (false
  // for anything else, an offset past the committed pages included).
  bool object_starts_at(uint64_t offset) const;
  // Owner only: blocks of dead owners no thread has adopted yet.
  uint64_t abandoned_blocks() const;


 private:
  friend struct RegionInternals;  // region/region_internals.h: region/'s own code and tests
  explicit Region(std::unique_ptr<RegionImpl> impl);
  // The publish log, made at first use; nullptr with errno if it cannot be.
  region::PublishEntry* publish_log();
  // Frees the reservations of dead processes that recovery or a reclaim
  // left as orphans.
  void free_orphaned_reservations();
  // Root primitives behind the templates. construct_root returns the object
  // and whether the caller must construct it (then finish_root publishes it).
  void* find_root(std::string_view name, uint64_t type, bool reserved_name = false) const;
  std::pair<void*, bool> reserve_root(std::string_view name, size_t size, size_t align, uint64_t type,
                                      bool reserved_name = false);
  void publish_root(std::string_view name, bool constructed);
  void* take_root(std::string_view name, uint64_t type);
  // Roots are objects of the best heap in a region of any method.
  void free_root_object(void* p);
  static uint64_t type_hash(const char* name);
  // The pool or last method's state (a reserved root), made by the first
  // process that asks; nullptr and errno.
  void* method_state() const;
  // `caller`: the return address the debug and profile methods name when
  // the caller set no site (region/call_site.h).
  void* method_alloc(size_t size, size_t align, bool zeroed, const void* caller) noexcept;
  void method_free(void* p, const void* caller) noexcept;
  // free, with the caller its reports and a profile name (every case: free
  // itself takes the common one inline).
  __attribute__((noinline)) void free_from(void* p, const void* caller) noexcept;
  // What alloc and free leave to the heap's slow paths, out of line.
  __attribute__((noinline)) void* alloc_from(heap::ThreadHeap* h, size_t size) noexcept;
  __attribute__((noinline)) void free_past_local(heap::ThreadHeap* h, void* p, const void* caller) noexcept;
  // alloc's other cases (read-only, other methods, no heap) and its failure.
  // caller_cfa: the canonical frame address of alloc's caller's call (the
  // call-chain pools read the next callers from it).
  __attribute__((noinline)) void* alloc_other(size_t size, const void* caller, const void* caller_cfa) noexcept;
  __attribute__((noinline, cold)) void* alloc_failed() noexcept;
  void* method_resize(void* p, size_t size, const void* caller) noexcept;
  size_t method_size(const void* p) const;
  // region/region_debug.cc
  heap::SiteTable* site_table() const;
  void* debug_alloc(size_t size, size_t align, bool zeroed, const void* caller) noexcept;
  void debug_free(void* p, const void* caller) noexcept;
  void* debug_resize(void* p, size_t size, const void* caller) noexcept;
  size_t debug_size(const void* p) const;
  void* debug_addr(const void* p) const;
  absl::Status debug_clear();
  void debug_stats(MethodStats* out) const;

  std::unique_ptr<RegionImpl> impl_;
};

template <class T, class... Args>
T* Region::find_or_construct(std::string_view name, Args&&... args) {
  uint64_t type = type_hash(detail::type_name<T>());
  auto [mem, construct] = reserve_root(name, sizeof(T), alignof(T), type);
  if (mem == nullptr || !construct) return static_cast<T*>(mem);
  struct Unpublish {  // a throwing constructor leaves no half-made root
    Region* region;
    std::string_view name;
    bool done = false;
    ~Unpublish() { if (!done) region->publish_root(name, false); }
  } guard{this, name};
  T* obj = new (mem) T(std::forward<Args>(args)...);
  guard.done = true;
  publish_root(name, true);
  return obj;
}

template <class T>
T* Region::find(std::string_view name) const {
  return static_cast<T*>(find_root(name, type_hash(detail::type_name<T>())));
}

template <class T>
bool Region::destroy(std::string_view name) {
  T* obj = static_cast<T*>(take_root(name, type_hash(detail::type_name<T>())));
  if (obj == nullptr) return false;
  obj->~T();
  free_root_object(obj);
  return true;
}

}  // namespace memd
