// Vmalloc's Vmdebug and Vmprofile as one object over a private heap of its
// own: every allocation is a debug block (heap/debug_block.h) of an arena
// the method makes, and the method reports, in the paper's form, each line
// starting "memd: " on stderr:
//
//   corrupted data:region=<label>:block=0x..:bad byte at=4:allocated at=t.c,4:...
//   free error:region=<label>:block=0x..:unallocated block:detected at=t.c,6:
//   free error:region=<label>:block=0x..:already freed:detected at=t.c,19:
//   alert:region=<label>:block=0x..:size=5:just allocated:detected at=t.c,10:
//
// With `debug` the blocks carry guards checked at free, at resize, on demand
// (check_all) and at every call (`check`), and freed blocks wait in a
// quarantine (the last 4096, at most 64 MiB) filled with a pattern, so a
// second free is "already freed" and a write after free is reported when
// the block leaves. With a profile, the method counts what each call site
// allocated and freed (region/profile_sites.h). With a trace descriptor,
// each call that did something is one line (docs/trace.md).
//
// The malloc shim runs one for a whole program (VMDEBUG, VMPROFILE,
// VMTRACE); vmalloc.h runs one per Vmdebug or Vmprofile region. Every call
// holds one lock: the method is for finding bugs, not for speed. No malloc
// and no exceptions (it runs inside the shim's malloc); callers give the
// call's site.
#pragma once

#include <pthread.h>

#include <cstddef>
#include <cstdint>

#include "region/profile_sites.h"
#include "heap/debug_block.h"
#include "heap/region_stats.h"
#include "region/arena_handle.h"

namespace memd::client {

struct DebugSettings {
  static constexpr int kMaxWatches = 16;
  bool debug = false;   // guards, quarantine, reports
  bool check = false;   // check every live block at every call (VM_DBCHECK)
  bool abort = false;   // abort at the first error (VM_DBABORT)
  int trace_fd = -1;    // a trace line per call here; -1: none
  uintptr_t watch[kMaxWatches] = {};  // watched addresses: every call meeting one says so
  int watches = 0;
};

// Called after an error is reported (a free or resize of something that is
// not a live block, an overwrite): Vmalloc's VM_BADADDR event.
using DebugErrorHook = void (*)(void* context, const void* block, const char* what);

class DebugMethod {
 public:
  constexpr DebugMethod() = default;
  DebugMethod(const DebugMethod&) = delete;
  DebugMethod& operator=(const DebugMethod&) = delete;

  // Makes the method's heap. `label` names the region in reports (copied,
  // truncated to 39 bytes); `profile` (kept, may be null: no profile)
  // collects the per-site counts. False with errno if the heap cannot be made.
  bool start(const DebugSettings& settings, const char* label, region::ProfileSites* profile);
  // Unmaps the heap and everything in it. REQUIRES: no other call meanwhile.
  void stop();
  bool started() const { return arena_.arena != nullptr; }
  void set_error_hook(DebugErrorHook hook, void* context) { hook_ = hook, hook_context_ = context; }

  // `zero`: the user's bytes read zero. nullptr, errno ENOMEM, on failure.
  void* alloc(size_t size, size_t align, bool zero, const heap::DebugSite& site);
  // False (reported) if p is not a live block; nothing is freed then.
  bool free(void* p, const heap::DebugSite& site);
  // Always moves the block (a stale pointer to the old place then reads the
  // freed pattern). nullptr, errno EINVAL (reported), if p is not a live
  // block; nullptr, ENOMEM, with p untouched, if there is no memory.
  // *old_size (if given): the size the block had.
  void* resize(void* p, size_t size, const heap::DebugSite& site, size_t* old_size = nullptr);
  // The size asked for of the live block p; 0 if it is not one (reported
  // as detected at *report_at unless that is null).
  size_t size(const void* p, const heap::DebugSite* report_at);
  // The live block holding p (its start), or nullptr: no report (vmaddr).
  void* block_of(const void* p);
  // Frees every live block (vmclear); quarantined blocks are released.
  void clear();
  // Reports every live block whose guards are overwritten (once each);
  // returns how many live blocks are overwritten now (reported before or not).
  int check_all();
  // check_all, and every quarantined block for writes after free (the
  // shim does it at exit, vmclose at close).
  int check_everything();
  // Adds an address to watch; false if the list is full.
  bool watch(const void* address);
  // Where trace lines go from now on (-1: nowhere).
  void set_trace_fd(int fd);
  // The profile summary (nothing without a profile).
  void write_profile(int fd);
  // Live blocks and the bytes asked for them; the heap's own numbers.
  struct Stats {
    uint64_t live_blocks = 0, live_bytes = 0, quarantined_blocks = 0;
    heap::RegionStats heap;
  };
  Stats stat();
  void trim();  // gives free pages back
  bool contains(const void* p) const;
  bool profiling() const { return profile_ != nullptr; }
  bool debugging() const { return settings_.debug; }
  const char* method_name() const;
  // For fork: the parent holds the lock across fork; both sides release it.
  void lock() { pthread_mutex_lock(&lock_); }
  void unlock() { pthread_mutex_unlock(&lock_); }

 private:
  static constexpr size_t kQuarantineBlocks = 4096;
  static constexpr size_t kQuarantineBytes = size_t{64} << 20;
  // A block's profile site (index + 1, 0: none) in its header's flags,
  // above the debug bits.
  static constexpr unsigned kProfileShift = 8;

  heap::DebugState classify_locked(const void* p) const;
  bool watched(const void* p) const;
  void alert(const void* user, const char* what, const heap::DebugSite& detected);
  void report_corrupted(const void* user, int64_t bad_byte, const char* how, const heap::DebugSite* detected);
  void report_call_error(const char* call, const void* p, const char* what, const heap::DebugSite& detected);
  void finish_error(void* line, const void* block, const char* what);
  bool check_block_locked(void* user, const heap::DebugSite* detected);
  int check_all_locked();
  bool take_live_locked(const char* call, void* p, const heap::DebugSite& site);
  void free_live_locked(void* p);
  void release_raw_locked(void* user);
  void evict_oldest_locked();
  void quarantine_locked(void* user);
  void trace_locked(const void* old, const void* now, uint64_t size, const heap::DebugSite& site) const;
  void* alloc_locked(size_t size, size_t align, const heap::DebugSite& site, const void* resized_from);

  region::ArenaHandle arena_;
  uint64_t secret_ = 0;
  DebugSettings settings_;
  region::ProfileSites* profile_ = nullptr;
  char label_[40] = {};
  DebugErrorHook hook_ = nullptr;
  void* hook_context_ = nullptr;
  pthread_mutex_t lock_ = PTHREAD_MUTEX_INITIALIZER;
  heap::DebugHeader* live_ = nullptr;  // the live blocks, newest first
  uint64_t live_blocks_ = 0, live_bytes_ = 0;
  static constexpr size_t kQuarantineRingBytes = kQuarantineBlocks * sizeof(void*);
  void** quarantine_ = nullptr;  // a ring of kQuarantineBlocks, mapped by start
  size_t quarantine_first_ = 0, quarantine_count_ = 0, quarantine_bytes_ = 0;
  uint64_t trace_start_us_ = 0;
};

}  // namespace memd::client
