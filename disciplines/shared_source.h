// The shared disciplines: a region's memory comes from a named object that
// several processes map at once and that may outlive them all.
//
//   kShm   a POSIX shared memory object "/memd.<name>" (tmpfs: volatile)
//   kFile  a regular file at a path (page cache, written back by msync)
//   kPmem  a regular file mapped through PMDK's libpmem; on a DAX file system
//          it is persistent memory flushed from user space, elsewhere it
//          behaves like kFile (is_pmem() tells which)
//
// The rules every shared discipline keeps:
//  - Every process maps the object once, over its whole reservation (the most
//    it may ever grow to), however long the object is now. The object grows
//    (extend) before any page past its end is used, and shrinks (shrink) only
//    over pages nobody uses: a page past the end is never touched, and pages
//    another process adds later are visible to every mapper without a remap.
//    kPmem objects are created at their whole reservation (libpmem maps a
//    file whole) and neither grow nor shrink.
//  - Backing is allocated (fallocate) before the heap touches a range
//    (commit). A full file system is then an error return and a kNoMemory
//    event, never a SIGBUS at the first write.
//  - Discard punches holes, so resident and on-disk size follow live data and
//    every mapper reads zeros afterwards.
//
// Setup calls return absl::Status. The data-plane calls (commit, discard,
// persist) neither throw nor allocate: failure is `false` with errno.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "heap/memory_source.h"

namespace memd::disciplines {

enum class DisciplineKind : uint32_t { kAnonymous = 0, kShm = 1, kFile = 2, kPmem = 3 };

// Vmalloc's exception events.
enum class SourceEvent : uint32_t { kNoMemory = 1, kBadAddress = 2, kOpen = 3, kClose = 4 };

// `what` is a static description of the event (never freed, never owned).
struct SourceEventInfo {
  SourceEvent event;
  const char* what;
  size_t offset;
  size_t length;
  int error;
};

// Called from data-plane code: must not allocate.
using SourceEventHandler = void (*)(void* context, const SourceEventInfo& info);

// Told of every change of an object's length this process makes: before it
// grows (returning false refuses the growth: a quota) and after it shrinks
// (the return value is ignored). Data-plane: must not allocate or block.
using LengthPolicy = bool (*)(void* context, size_t old_length, size_t new_length);

struct SharedSourceOptions {
  size_t length = 0;       // create: the reservation, the most the object may grow to (a multiple of 4096)
  size_t initial_length = 0;  // create: the object's length at first (0: `length`; kPmem: always `length`)
  bool create = false;     // create a new object; ALREADY_EXISTS if it exists (O_EXCL)
  bool read_only = false;  // open an existing object for reading only
  mode_t mode = 0600;
};

// Objects are sized and committed in units of this many bytes.
inline constexpr size_t kSharedPageSize = 4096;
// No discipline hands out an object larger than this.
inline constexpr size_t kMaxSharedObject = size_t{1} << 40;

// Region names for shm objects: 1..250 chars of [A-Za-z0-9._-], not starting
// with '.', no "..". INVALID_ARGUMENT naming the problem otherwise. The shm
// object is "/memd.<name>".
absl::Status validate_region_name(std::string_view name);
// File/pmem paths: non-empty, no NUL; INVALID_ARGUMENT otherwise.
absl::Status validate_path(std::string_view path);
// The largest object a discipline allows at `name`: min(1 TiB, total size of
// the file system that would hold it (statvfs of /dev/shm for shm, of the
// parent directory for files)). kAnonymous has no object: INVALID_ARGUMENT.
absl::StatusOr<size_t> discipline_limit(DisciplineKind kind, std::string_view name);
// Deletes the backing object (shm_unlink / unlink). NOT_FOUND if absent.
// Processes that have it mapped keep their mapping.
absl::Status remove_shared(DisciplineKind kind, std::string_view name);

class SharedSource final : public heap::MemorySource {
 public:
  // Opens or creates the backing object without mapping it. Creating checks
  // the length against discipline_limit, creates the object O_EXCL with
  // `mode` and sets its length as a sparse object; a failure after the object
  // exists removes it again. Errors: NOT_FOUND, ALREADY_EXISTS,
  // PERMISSION_DENIED, INVALID_ARGUMENT (bad name, length 0, unaligned or over
  // the limit, not a regular file), each naming the object and the reason.
  static absl::StatusOr<std::unique_ptr<SharedSource>> open(DisciplineKind kind, std::string_view name,
                                                            const SharedSourceOptions& options);
  SharedSource(const SharedSource&) = delete;
  SharedSource& operator=(const SharedSource&) = delete;
  ~SharedSource() override;  // fires kClose (if mapped), unmaps, closes

  // The current length of the backing object (fstat); 0 if that fails.
  size_t length() const;
  // Whether what this process relies on is still backed: DATA_LOSS if the
  // object is now shorter than the length this process requires (its own
  // extend and shrink calls, or set_required_length), or a fault in the
  // mapping found no backing (contained by the fault guard, see
  // fault_guard.h). Once this fails, the mapping holds private zero pages
  // where the fault was: stop using it.
  absl::Status backing_status() const;
  // The length below which a shorter object means it was truncated under
  // this process (at map: the object's length then).
  void set_required_length(size_t bytes) { required_.store(bytes, std::memory_order_relaxed); }
  size_t required_length() const { return required_.load(std::memory_order_relaxed); }
  // Reads from the object without mapping it (to check a header before
  // mapping). OUT_OF_RANGE if the object is shorter than offset + len.
  absl::Status read(size_t offset, void* out, size_t len) const;
  // Maps the object MAP_SHARED over `reservation` bytes (0: its length now;
  // never less than its length), writable unless read_only. Pages past the
  // object's end are address space only, until the object grows over them.
  // A non-null
  // `hint` is tried exactly (MAP_FIXED_NOREPLACE) before anywhere else;
  // at_hint() tells which happened. If the hint range is this process's
  // inherited mapping of the same object (a forked child), the object is
  // mapped over it. kPmem maps through libpmem, which picks
  // the address itself (the hint is ignored). Fires kOpen.
  absl::Status map(void* hint = nullptr, size_t reservation = 0);
  bool at_hint() const { return at_hint_; }
  // Takes an exclusive, non-blocking flock on the object: the region's single
  // owner. FAILED_PRECONDITION if another open of the object holds it. The
  // lock belongs to this open; a child forked afterwards shares it.
  absl::Status lock_owner();
  // Takes a shared, non-blocking flock: no owner holds the object, and none
  // can take it while this open lasts (tools that read a stopped region).
  // FAILED_PRECONDITION naming the owner if one holds it.
  absl::Status lock_shared();

  // MemorySource, after map():
  char* base() const override { return base_; }
  size_t reserved_bytes() const override { return mapped_; }
  // Allocates backing for the range (fallocate), so a full file system fails
  // here: errno ENOMEM and a kNoMemory event carrying the system's error.
  // Works again on a range that was discarded. Read-only: errno EROFS.
  bool commit(size_t offset, size_t len) override;
  // Pages that were discarded are holes again: allocate their backing anew.
  bool recommit(size_t offset, size_t len) override { return commit(offset, len); }
  bool commits_on_use() const override { return true; }
  // Punches the range out of the object (fallback: MADV_REMOVE). Afterwards
  // every mapper reads zeros and resident and on-disk size drop.
  bool discard(size_t offset, size_t len) override;
  // Makes the range (rounded out to pages) durable: shm nothing, file msync,
  // pmem pmem_persist on real pmem and pmem_msync elsewhere.
  bool persist(size_t offset, size_t len) override;
  // Lengthens the object to `end` bytes (a sparse extension: no backing yet),
  // if it is shorter, after the length policy agrees. Refusals fire
  // kNoMemory naming the reason: EDQUOT (the policy), EFBIG (the process's
  // file size limit), ENOMEM (past the reservation), or ftruncate's error.
  bool extend(size_t end) override;
  // Cuts the object to `end` bytes. REQUIRES: no process uses a page past
  // `end` (the page-heap owner's free tail). False if nothing was cut.
  bool shrink(size_t end) override;
  // The object's length as this process last set or saw it (no system call).
  size_t known_length() const { return known_length_.load(std::memory_order_relaxed); }
  // Set before the first extend: every growth asks it, every shrink tells it.
  void set_length_policy(LengthPolicy policy, void* context) {
    policy_ = policy;
    policy_context_ = context;
  }

  // In a child made by fork(): turns this process's mapping of the object
  // into a private copy-on-write one at the same address, so that the child
  // writing to objects it inherited does not change them under the parent
  // (what fork promises for the rest of memory). The child sees the object
  // as it is now, and pages it has not written still follow the object.
  // No allocation (atfork handlers call it); false and errno on failure.
  bool remap_private_in_child();

  // Set before map() to see kOpen. The handler must not allocate.
  void set_event_handler(SourceEventHandler handler, void* context) {
    handler_ = handler;
    handler_context_ = context;
  }
  DisciplineKind kind() const { return kind_; }
  bool read_only() const { return read_only_; }
  bool created() const { return created_; }
  bool is_pmem() const { return is_pmem_; }
  const std::string& name() const { return name_; }  // the name or path as given

 private:
  SharedSource(DisciplineKind kind, std::string name, int fd, bool read_only, bool created)
      : kind_(kind), name_(std::move(name)), fd_(fd), read_only_(read_only), created_(created) {}

  void fire(SourceEvent event, const char* what, size_t offset, size_t length, int error) const;
  // Whether [address, address + len) is already a shared mapping of this
  // object, from offset 0 (a mapping a forked child inherited).
  bool maps_same_object_at(void* address, size_t len) const;
  // errno set and false unless [offset, offset + len) is page-aligned, mapped
  // and writable; fires kBadAddress for a range outside the mapping.
  bool check_writable_range(size_t offset, size_t len) const;
  // The object as messages name it, e.g. `shm object "/memd.x"`.
  std::string describe() const;

  DisciplineKind kind_;
  std::string name_;
  int fd_ = -1;
  bool read_only_ = false;
  bool created_ = false;
  char* base_ = nullptr;
  size_t mapped_ = 0;
  // Written by the page-heap owner's growth (under its lock), read by any
  // thread (stat, backing_status).
  std::atomic<size_t> known_length_{0};  // the object's length as this process last set or saw it
  std::atomic<size_t> required_{0};      // see backing_status
  bool at_hint_ = false;
  bool is_pmem_ = false;
  bool mapped_by_pmem_ = false;  // unmap with pmem_unmap, not munmap
  int guard_ = -1;               // the mapping's slot in the fault guard
  SourceEventHandler handler_ = nullptr;
  void* handler_context_ = nullptr;
  LengthPolicy policy_ = nullptr;
  void* policy_context_ = nullptr;
};

}  // namespace memd::disciplines
