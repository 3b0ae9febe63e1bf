#include "client/debug_method.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "region/debug_report.h"
#include "region/site_text.h"
#include "client/trace_line.h"
#include "heap/inspect.h"
#include "heap/region_format.h"
#include "heap/thread_heap.h"
#include "region/arena.h"
#include "region/options.h"
#include "region/report_line.h"
#include "region/thread_heaps.h"

namespace memd::client {
namespace {

using heap::DebugHeader;
using heap::DebugSite;
using heap::DebugState;
using region::Line;

struct Locked {
  explicit Locked(pthread_mutex_t* m) : m(m) { pthread_mutex_lock(m); }
  ~Locked() { pthread_mutex_unlock(m); }
  pthread_mutex_t* m;
};

void* user_of(DebugHeader* h) { return reinterpret_cast<char*>(h) + heap::kDebugHeadBytes; }

}  // namespace

bool DebugMethod::start(const DebugSettings& settings, const char* label, region::ProfileSites* profile) {
  region::Arena* arena = region::Arena::create(region::process_arena_options());
  region::ArenaHandle handle;
  if (arena == nullptr) return false;
  if (!region::register_arena(arena, &handle)) {
    int e = errno;
    region::Arena::destroy(arena);
    errno = e;
    return false;
  }
  // The quarantine's ring, mapped rather than a member: its pages are
  // touched as it fills, and a method never started (the shim's, in most
  // programs) costs no resident memory for it.
  void* ring = mmap(nullptr, kQuarantineRingBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (ring == MAP_FAILED) {
    int e = errno;
    region::unregister_arena(handle);
    region::Arena::destroy(arena);
    errno = e;
    return false;
  }
  quarantine_ = static_cast<void**>(ring);
  arena_ = handle;
  secret_ = heap::random_secret();
  settings_ = settings;
  profile_ = profile;
  std::strncpy(label_, label, sizeof label_ - 1);
  trace_start_us_ = monotonic_us();
  return true;
}

void DebugMethod::stop() {
  if (arena_.arena == nullptr) return;
  region::unregister_arena(arena_);
  region::Arena::destroy(arena_.arena);
  arena_ = {};
  live_ = nullptr;
  live_blocks_ = live_bytes_ = 0;
  munmap(quarantine_, kQuarantineRingBytes);
  quarantine_ = nullptr;
  quarantine_first_ = quarantine_count_ = quarantine_bytes_ = 0;
}

const char* DebugMethod::method_name() const {
  return settings_.debug ? "debug" : profile_ != nullptr ? "profile" : "best";
}

bool DebugMethod::contains(const void* p) const { return arena_.arena->contains(p); }

void DebugMethod::finish_error(void* line, const void* block, const char* what) {
  Line& l = *static_cast<Line*>(line);
  l.add("\n");
  l.write_out();
  if (hook_ != nullptr) hook_(hook_context_, block, what);
  if (settings_.abort) std::abort();
}

void DebugMethod::report_corrupted(const void* user, int64_t bad_byte, const char* how, const DebugSite* detected) {
  Line l = region::start_debug_report("corrupted data", label_, user);
  l.add("bad byte at=");
  l.add_signed(bad_byte);
  l.add(":");
  if (how != nullptr) {
    l.add(how);
    l.add(":");
  }
  l.add("allocated at=");
  region::add_site(l, heap::debug_header(user)->site);
  l.add(":");
  if (detected != nullptr) {
    l.add("detected at=");
    region::add_site(l, *detected);
    l.add(":");
  }
  finish_error(&l, user, how != nullptr ? how : "corrupted data");
}

void DebugMethod::report_call_error(const char* call, const void* p, const char* what, const DebugSite& detected) {
  Line l = region::start_debug_report(call, label_, p);
  l.add(what);
  l.add(":detected at=");
  region::add_site(l, detected);
  l.add(":");
  finish_error(&l, p, what);
}

bool DebugMethod::watched(const void* p) const {
  for (int i = 0; i < settings_.watches; ++i) {
    if (settings_.watch[i] == reinterpret_cast<uintptr_t>(p)) return true;
  }
  return false;
}

bool DebugMethod::watch(const void* address) {
  Locked locked(&lock_);
  if (settings_.watches == DebugSettings::kMaxWatches) return false;
  settings_.watch[settings_.watches++] = reinterpret_cast<uintptr_t>(address);
  return true;
}

void DebugMethod::alert(const void* user, const char* what, const DebugSite& detected) {
  region::write_debug_alert(label_, user, heap::debug_header(user)->size, what, detected);
}

// Reports a live block whose guards were overwritten, once; true if they are.
bool DebugMethod::check_block_locked(void* user, const DebugSite* detected) {
  DebugHeader* h = heap::debug_header(user);
  int64_t bad;
  if (!heap::debug_find_overwrite(user, &bad)) return false;
  if ((h->flags & heap::kDebugReported) == 0) {
    h->flags |= heap::kDebugReported;
    report_corrupted(user, bad, nullptr, detected);
  }
  return true;
}

int DebugMethod::check_all_locked() {
  int bad = 0;
  for (DebugHeader* h = live_; h != nullptr; h = h->next) bad += check_block_locked(user_of(h), nullptr) ? 1 : 0;
  return bad;
}

int DebugMethod::check_all() {
  Locked locked(&lock_);
  return check_all_locked();
}

int DebugMethod::check_everything() {
  Locked locked(&lock_);
  int bad = check_all_locked();
  for (size_t i = 0; i < quarantine_count_; ++i) {
    void* user = quarantine_[(quarantine_first_ + i) % kQuarantineBlocks];
    int64_t at;
    if (heap::debug_find_write_after_free(user, &at)) {
      report_corrupted(user, at, "written after free", nullptr);
      ++bad;
    }
  }
  return bad;
}

// What p is: a live or freed debug block of this heap, or anything else.
DebugState DebugMethod::classify_locked(const void* p) const {
  const region::Arena* a = arena_.arena;
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0 || !a->contains(p)) return DebugState::kNotABlock;
  const char* before = static_cast<const char*>(p) - 1;
  if (!a->contains(before)) return DebugState::kNotABlock;
  // Header and guard lie inside the raw object that holds the byte before
  // p; whether it is one of ours, live or freed, its state word says.
  const char* raw = static_cast<const char*>(heap::region_object_slot(a->region(), a->classes(), before));
  if (raw == nullptr || static_cast<const char*>(p) - heap::kDebugHeadBytes < raw) return DebugState::kNotABlock;
  return heap::debug_state(p, secret_);
}

void* DebugMethod::block_of(const void* p) {
  // A walk of the live blocks: a debugging call, and the only answer that
  // cannot be fooled by a freed block or bytes that look like a header.
  Locked locked(&lock_);
  const char* c = static_cast<const char*>(p);
  for (DebugHeader* h = live_; h != nullptr; h = h->next) {
    char* user = static_cast<char*>(user_of(h));
    if (c >= user && c < user + (h->size != 0 ? h->size : 1)) return user;
  }
  return nullptr;
}

void DebugMethod::release_raw_locked(void* user) {
  region::thread_heap_or_stranger(arena_)->free(heap::debug_raw(user));
}

void DebugMethod::evict_oldest_locked() {
  void* user = quarantine_[quarantine_first_];
  quarantine_first_ = (quarantine_first_ + 1) % kQuarantineBlocks;
  --quarantine_count_;
  quarantine_bytes_ -= heap::debug_header(user)->size;
  int64_t bad;
  if (heap::debug_find_write_after_free(user, &bad)) report_corrupted(user, bad, "written after free", nullptr);
  heap::debug_header(user)->state = 0;
  release_raw_locked(user);
}

void DebugMethod::quarantine_locked(void* user) {
  size_t bytes = heap::debug_header(user)->size;
  if (bytes > kQuarantineBytes) {
    heap::debug_header(user)->state = 0;
    release_raw_locked(user);
    return;
  }
  while (quarantine_count_ == kQuarantineBlocks ||
         (quarantine_count_ > 0 && quarantine_bytes_ + bytes > kQuarantineBytes)) {
    evict_oldest_locked();
  }
  quarantine_[(quarantine_first_ + quarantine_count_) % kQuarantineBlocks] = user;
  ++quarantine_count_;
  quarantine_bytes_ += bytes;
}

void DebugMethod::trace_locked(const void* old, const void* now, uint64_t size, const DebugSite& site) const {
  if (settings_.trace_fd < 0) return;
  write_trace_line(settings_.trace_fd, old, now, size, label_, method_name(), site, trace_start_us_);
}

// `resized_from`: the block a resize moves from (traced as one line).
void* DebugMethod::alloc_locked(size_t size, size_t align, const DebugSite& site, const void* resized_from) {
  heap::DebugLayout layout;
  if (!heap::debug_layout(size, align, &layout)) {
    errno = ENOMEM;
    return nullptr;
  }
  if (settings_.check) check_all_locked();
  heap::ThreadHeap* h = region::thread_heap_or_stranger(arena_);
  void* raw = layout.raw_align != 0 ? h->alloc_aligned(layout.raw_bytes, layout.raw_align) : h->alloc(layout.raw_bytes);
  if (raw == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  void* user = heap::debug_format(raw, layout, size, site, secret_);
  DebugHeader* hd = heap::debug_header(user);
  hd->prev = nullptr;
  hd->next = live_;
  if (live_ != nullptr) live_->prev = hd;
  live_ = hd;
  ++live_blocks_;
  live_bytes_ += size;
  if (profile_ != nullptr) {
    uint32_t index = profile_->index_of(site);
    hd->flags |= (index + 1) << kProfileShift;
    profile_->allocated(index, size);
  }
  trace_locked(resized_from, user, size, site);
  return user;
}

void* DebugMethod::alloc(size_t size, size_t align, bool zero, const DebugSite& site) {
  // Attaching this thread to the heap may allocate: not under the lock.
  if (region::thread_heap(arena_) == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  void* user;
  bool watched_block;
  {
    Locked locked(&lock_);  // the watch list changes under it (vmdbwatch)
    user = alloc_locked(size, align, site, nullptr);
    watched_block = user != nullptr && watched(user);
  }
  if (user == nullptr) return nullptr;
  if (zero) std::memset(user, 0, size);
  if (watched_block) alert(user, "just allocated", site);
  return user;
}

// free and resize: the block p names, checked; false (reported) if p is
// not a live block.
bool DebugMethod::take_live_locked(const char* call, void* p, const DebugSite& site) {
  if (settings_.check) check_all_locked();
  DebugState s = classify_locked(p);
  if (s != DebugState::kLive) {
    report_call_error(call, p, s == DebugState::kFreed ? "already freed" : "unallocated block", site);
    return false;
  }
  if (settings_.debug) check_block_locked(p, &site);
  return true;
}

void DebugMethod::free_live_locked(void* p) {
  DebugHeader* h = heap::debug_header(p);
  if (h->prev != nullptr) h->prev->next = h->next;
  else live_ = h->next;
  if (h->next != nullptr) h->next->prev = h->prev;
  --live_blocks_;
  live_bytes_ -= h->size;
  if (uint32_t index = h->flags >> kProfileShift; index != 0) profile_->freed(index - 1, h->size);
  if (settings_.debug) {
    heap::debug_mark_freed(p, secret_);
    quarantine_locked(p);
  } else {
    h->state = 0;
    release_raw_locked(p);
  }
}

bool DebugMethod::free(void* p, const DebugSite& site) {
  Locked locked(&lock_);
  if (watched(p) && classify_locked(p) == DebugState::kLive) alert(p, "being freed", site);
  if (!take_live_locked("free error", p, site)) return false;
  trace_locked(p, nullptr, heap::debug_header(p)->size, site);
  free_live_locked(p);
  return true;
}

void* DebugMethod::resize(void* p, size_t size, const DebugSite& site, size_t* old_size_out) {
  if (region::thread_heap(arena_) == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  Locked locked(&lock_);
  if (!take_live_locked("resize error", p, site)) {
    errno = EINVAL;
    return nullptr;
  }
  if (watched(p)) alert(p, "being resized", site);
  size_t old_size = heap::debug_header(p)->size;
  if (old_size_out != nullptr) *old_size_out = old_size;
  void* q = alloc_locked(size, 0, site, p);
  if (q == nullptr) return nullptr;
  std::memcpy(q, p, old_size < size ? old_size : size);
  free_live_locked(p);
  return q;
}

size_t DebugMethod::size(const void* p, const DebugSite* report_at) {
  Locked locked(&lock_);
  DebugState s = classify_locked(p);
  if (s == DebugState::kLive) return heap::debug_header(p)->size;
  if (report_at != nullptr) {
    report_call_error("size error", p, s == DebugState::kFreed ? "already freed" : "unallocated block", *report_at);
  }
  return 0;
}

void DebugMethod::clear() {
  Locked locked(&lock_);
  while (live_ != nullptr) free_live_locked(user_of(live_));
  while (quarantine_count_ > 0) evict_oldest_locked();
}

void DebugMethod::set_trace_fd(int fd) {
  Locked locked(&lock_);
  settings_.trace_fd = fd;
}

void DebugMethod::write_profile(int fd) {
  Locked locked(&lock_);
  if (profile_ == nullptr) return;
  heap::RegionStats st = arena_.arena->stat();
  profile_->write_summary(fd, label_, uint64_t{st.pages_in_use} << heap::kPageShift);
}

DebugMethod::Stats DebugMethod::stat() {
  Locked locked(&lock_);
  Stats s;
  s.live_blocks = live_blocks_;
  s.live_bytes = live_bytes_;
  s.quarantined_blocks = quarantine_count_;
  s.heap = arena_.arena->stat();
  return s;
}

void DebugMethod::trim() {
  Locked locked(&lock_);
  arena_.arena->purge_all();
}

}  // namespace memd::client
