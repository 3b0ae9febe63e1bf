// Named roots: a table in the region of (name -> object offset, size, type),
// changed under a robust, recursive, process-shared mutex in the header.
// Robust: a process killed while holding it hands the next locker
// EOWNERDEAD, and the table is repaired (a root left half constructed is
// dropped; its object leaks). Recursive: a constructor may make roots too.
// Waited for at most MEMD_ROOTS_LOCK_TIMEOUT_MS: robustness covers a holder
// that dies, not one that is stopped (SIGSTOP, a debugger) and keeps it.
#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "region/diag.h"
#include "region/options.h"
#include "region/region.h"
#include "region/region_impl.h"
#include "heap/region_format.h"

namespace memd {
namespace {

using heap::RootEntry;
using heap::RootState;

void repair_roots(const heap::Region& r) {
  for (uint32_t i = 0; i < r.max_roots; ++i) {
    if (r.roots[i].state.load() == RootState::kConstructing) r.roots[i].state.store(RootState::kFree);
  }
}

bool reset_roots_lock(pthread_mutex_t* m);

// glibc asserts (aborts the process) on a mutex whose kind is not one it
// made, and the roots lock lies in memory any client may write: before a
// call into pthread, its kind must be the one format gave it.
bool roots_lock_intact(pthread_mutex_t* m) {
  pthread_mutex_t fresh;
  if (!reset_roots_lock(&fresh)) return false;
  bool same = fresh.__data.__kind == m->__data.__kind;
  pthread_mutex_destroy(&fresh);
  return same;
}

// pthread_mutex_timedlock takes a CLOCK_REALTIME deadline (a step of the
// wall clock stretches or shortens the wait); pthread_mutex_clocklock would
// take a monotonic one, but the thread sanitizer does not know that call.
timespec deadline_after(uint64_t ms) {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  t.tv_sec += static_cast<time_t>(ms / 1000);
  t.tv_nsec += static_cast<long>(ms % 1000) * 1000000;
  if (t.tv_nsec >= 1000000000) {
    t.tv_sec += 1;
    t.tv_nsec -= 1000000000;
  }
  return t;
}

// False, with errno set and the roots untouched, if the lock cannot be had:
// ETIMEDOUT when another process has held it past the bound (reported,
// naming the region: a holder may be stopped, and every root call of the
// region waits for it).
bool lock_roots(const RegionImpl& impl) {
  const heap::Region& r = impl.region;
  if (!roots_lock_intact(&r.header->roots_lock)) {
    (void)reset_roots_lock(&r.header->roots_lock);
    repair_roots(r);
  }
  uint64_t bound_ms = region::roots_lock_timeout_ms();
  timespec deadline = deadline_after(bound_ms);
  int rc = pthread_mutex_timedlock(&r.header->roots_lock, &deadline);
  if (rc == ENOTRECOVERABLE) {
    // Written so by a client (ours always make it consistent): nobody can
    // hold it in that state, so it is made anew, as a broken kind is.
    (void)reset_roots_lock(&r.header->roots_lock);
    repair_roots(r);
    rc = pthread_mutex_timedlock(&r.header->roots_lock, &deadline);
  }
  if (rc == EOWNERDEAD) {
    repair_roots(r);
    pthread_mutex_consistent(&r.header->roots_lock);
    return true;
  }
  if (rc == 0) return true;
  if (rc == ETIMEDOUT) region::report_roots_lock_timeout(impl.name.c_str(), bound_ms);
  errno = rc;
  return false;
}

void unlock_roots(const heap::Region& r) { pthread_mutex_unlock(&r.header->roots_lock); }

bool reset_roots_lock(pthread_mutex_t* m) { return heap::init_shared_mutex(m); }

RootEntry* find_entry(const heap::Region& r, std::string_view name) {
  for (uint32_t i = 0; i < r.max_roots; ++i) {
    RootEntry& e = r.roots[i];
    if (e.state.load() == RootState::kFree) continue;
    if (e.name_len == name.size() && std::memcmp(e.name, name.data(), name.size()) == 0) return &e;
  }
  return nullptr;
}

// Names beginning "memd:" are memd's own (a pool or last region's method
// state): programs can neither make, find nor destroy them.
constexpr std::string_view kReservedPrefix = "memd:";
bool reserved_root_name(std::string_view name) { return name.substr(0, kReservedPrefix.size()) == kReservedPrefix; }
bool valid_root_name(std::string_view name, bool reserved_ok = false) {
  return !name.empty() && name.size() <= heap::kRootNameMax && (reserved_ok || !reserved_root_name(name));
}

}  // namespace

uint64_t root_type_hash(const char* name) {
  uint64_t h = 1469598103934665603ull;
  for (const char* c = name; *c; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 1099511628211ull;
  return h;
}

uint64_t Region::type_hash(const char* name) { return root_type_hash(name); }

void* RegionImpl::ready_root(std::string_view name, uint64_t type, uint64_t* size) const {
  const heap::Region& r = region;
  // Reading needs no lock: a ready entry's fields are written before its
  // state (and read-only attachments cannot take the lock).
  for (uint32_t i = 0; i < r.max_roots; ++i) {
    RootEntry& e = r.roots[i];
    if (e.state.load(std::memory_order_acquire) != RootState::kReady) continue;
    if (e.name_len != name.size() || std::memcmp(e.name, name.data(), name.size()) != 0) continue;
    if (e.type != type) {
      errno = EINVAL;  // a root of another type
      return nullptr;
    }
    // The entry is memory clients write: an object past the data pages is none.
    if (e.offset >= r.data_bytes || e.size > r.data_bytes - e.offset) {
      errno = EINVAL;
      return nullptr;
    }
    if (size != nullptr) *size = e.size;
    return r.data + e.offset;
  }
  errno = ENOENT;
  return nullptr;
}

void* Region::find_root(std::string_view name, uint64_t type, bool reserved_name) const {
  if (!valid_root_name(name, reserved_name)) {
    errno = EINVAL;
    return nullptr;
  }
  return impl_->ready_root(name, type);
}

std::pair<void*, bool> Region::reserve_root(std::string_view name, size_t size, size_t align, uint64_t type,
                                            bool reserved_name) {
  const heap::Region& r = impl_->region;
  if (!valid_root_name(name, reserved_name) || impl_->read_only) {
    errno = impl_->read_only ? EROFS : EINVAL;
    return {nullptr, false};
  }
  if (!lock_roots(*impl_)) return {nullptr, false};
  if (RootEntry* e = find_entry(r, name)) {
    void* p = nullptr;
    if (e->state.load() == RootState::kReady && e->type == type) p = r.data + e->offset;
    else errno = e->state.load() == RootState::kReady ? EINVAL : EBUSY;  // another type / being made by us
    unlock_roots(r);
    return {p, false};
  }
  RootEntry* slot = nullptr;
  for (uint32_t i = 0; i < r.max_roots && slot == nullptr; ++i) {
    if (r.roots[i].state.load() == RootState::kFree) slot = &r.roots[i];
  }
  heap::ThreadHeap* heap = slot ? impl_->thread_heap() : nullptr;  // the best heap, whatever the method
  void* mem = heap ? heap->alloc_aligned(size ? size : 1, align < 16 ? 16 : align) : nullptr;
  if (mem == nullptr) {
    if (slot == nullptr) errno = ENOSPC;
    unlock_roots(r);
    return {nullptr, false};
  }
  slot->name_len = static_cast<uint32_t>(name.size());
  std::memcpy(slot->name, name.data(), name.size());
  slot->name[name.size()] = '\0';
  slot->offset = offset_of(mem);
  slot->size = size;
  slot->type = type;
  slot->state.store(RootState::kConstructing, std::memory_order_release);
  // Stays locked until publish_root: others wait for the object to exist.
  return {mem, true};
}

void Region::publish_root(std::string_view name, bool constructed) {
  const heap::Region& r = impl_->region;
  RootEntry* e = find_entry(r, name);
  if (e != nullptr && e->state.load() == RootState::kConstructing) {
    if (constructed) {
      e->state.store(RootState::kReady, std::memory_order_release);
    } else {
      free_root_object(r.data + e->offset);
      e->state.store(RootState::kFree, std::memory_order_release);
    }
  }
  unlock_roots(r);
}

void* Region::take_root(std::string_view name, uint64_t type) {
  const heap::Region& r = impl_->region;
  if (!valid_root_name(name) || impl_->read_only) {
    errno = impl_->read_only ? EROFS : EINVAL;
    return nullptr;
  }
  if (!lock_roots(*impl_)) return nullptr;
  RootEntry* e = find_entry(r, name);
  void* p = nullptr;
  if (e == nullptr || e->state.load() != RootState::kReady) {
    errno = ENOENT;
  } else if (e->type != type) {
    errno = EINVAL;
  } else {
    p = r.data + e->offset;
    e->state.store(RootState::kFree, std::memory_order_release);
  }
  unlock_roots(r);
  return p;
}

namespace {
constexpr const char* kBytesType = "memd:bytes";
}  // namespace

void* Region::root_bytes(std::string_view name, size_t size, bool* created) {
  *created = false;
  auto [mem, construct] = reserve_root(name, size, 16, type_hash(kBytesType));
  if (mem == nullptr || !construct) return mem;
  std::memset(mem, 0, size);
  publish_root(name, true);
  *created = true;
  return mem;
}

void* Region::find_bytes(std::string_view name) const { return find_root(name, type_hash(kBytesType)); }

std::vector<RootInfo> Region::list() const {
  const heap::Region& r = impl_->region;
  std::vector<RootInfo> out;
  for (uint32_t i = 0; i < r.max_roots; ++i) {
    RootEntry& e = r.roots[i];
    if (e.state.load(std::memory_order_acquire) != RootState::kReady) continue;
    // The table is in the region, where any client (or a damaged file) may
    // have written a length past the name's room: such an entry names nothing.
    size_t len = e.name_len;
    if (len > heap::kRootNameMax) continue;
    if (reserved_root_name(std::string_view(e.name, len))) continue;
    out.push_back({std::string(e.name, len), e.offset, e.size, e.type});
  }
  return out;
}

void RegionImpl::settle_roots(bool clients_alive) {
  pthread_mutex_t* m = &region.header->roots_lock;
  int rc = roots_lock_intact(m) ? pthread_mutex_trylock(m) : ENOTRECOVERABLE;
  if (rc == 0 || rc == EOWNERDEAD) {
    // Nobody constructs now: what is still marked constructing was left by
    // a process that died (EOWNERDEAD says so).
    repair_roots(region);
    if (rc == EOWNERDEAD) pthread_mutex_consistent(m);
    pthread_mutex_unlock(m);
    return;
  }
  // Held: by a live client in the middle of a constructor, which publishes
  // (or, dying, hands the next locker EOWNERDEAD). A restart of the daemon
  // must not take the root from under it.
  if (rc == EBUSY && clients_alive) return;
  // Held by no process that runs (a holder that died with the machine: no
  // robust-list cleanup ran), or unrecoverable: no one can be waiting on it,
  // as only clients with a lease construct and none is left.
  (void)reset_roots_lock(m);
  repair_roots(region);
}

}  // namespace memd
