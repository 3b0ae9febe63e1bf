// Named roots: a table in the region of (name -> object offset, size, type),
// changed under a robust, recursive, process-shared mutex in the header.
// Robust: a process killed while holding it hands the next locker
// EOWNERDEAD, and the table is repaired (a root left half constructed is
// dropped; its object leaks). Recursive: a constructor may make roots too.
#include <pthread.h>

#include <cerrno>
#include <cstring>

#include "client/region.h"
#include "client/region_impl.h"
#include "heap/region_format.h"

namespace memd {
namespace {

using heap::RootEntry;
using heap::RootState;

void repair_roots(const heap::Region& r) {
  for (uint32_t i = 0; i < r.header->max_roots; ++i) {
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

void lock_roots(const heap::Region& r) {
  if (!roots_lock_intact(&r.header->roots_lock)) {
    (void)reset_roots_lock(&r.header->roots_lock);
    repair_roots(r);
  }
  int rc = pthread_mutex_lock(&r.header->roots_lock);
  if (rc == EOWNERDEAD) {
    repair_roots(r);
    pthread_mutex_consistent(&r.header->roots_lock);
  }
}

void unlock_roots(const heap::Region& r) { pthread_mutex_unlock(&r.header->roots_lock); }

bool reset_roots_lock(pthread_mutex_t* m) { return heap::init_shared_mutex(m); }

RootEntry* find_entry(const heap::Region& r, std::string_view name) {
  for (uint32_t i = 0; i < r.header->max_roots; ++i) {
    RootEntry& e = r.roots[i];
    if (e.state.load() == RootState::kFree) continue;
    if (e.name_len == name.size() && std::memcmp(e.name, name.data(), name.size()) == 0) return &e;
  }
  return nullptr;
}

bool valid_root_name(std::string_view name) { return !name.empty() && name.size() <= heap::kRootNameMax; }

}  // namespace

uint64_t Region::type_hash(const char* name) {
  uint64_t h = 1469598103934665603ull;
  for (const char* c = name; *c; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 1099511628211ull;
  return h;
}

void* Region::find_root(std::string_view name, uint64_t type) const {
  const heap::Region& r = impl_->region;
  if (!valid_root_name(name)) {
    errno = EINVAL;
    return nullptr;
  }
  // Reading needs no lock: a ready entry's fields are written before its
  // state (and read-only attachments cannot take the lock).
  for (uint32_t i = 0; i < r.header->max_roots; ++i) {
    RootEntry& e = r.roots[i];
    if (e.state.load(std::memory_order_acquire) != RootState::kReady) continue;
    if (e.name_len != name.size() || std::memcmp(e.name, name.data(), name.size()) != 0) continue;
    if (e.type != type) {
      errno = EINVAL;  // a root of another type
      return nullptr;
    }
    return r.data + e.offset;
  }
  errno = ENOENT;
  return nullptr;
}

std::pair<void*, bool> Region::reserve_root(std::string_view name, size_t size, size_t align, uint64_t type) {
  const heap::Region& r = impl_->region;
  if (!valid_root_name(name) || impl_->read_only) {
    errno = impl_->read_only ? EROFS : EINVAL;
    return {nullptr, false};
  }
  lock_roots(r);
  if (RootEntry* e = find_entry(r, name)) {
    void* p = nullptr;
    if (e->state.load() == RootState::kReady && e->type == type) p = r.data + e->offset;
    else errno = e->state.load() == RootState::kReady ? EINVAL : EBUSY;  // another type / being made by us
    unlock_roots(r);
    return {p, false};
  }
  RootEntry* slot = nullptr;
  for (uint32_t i = 0; i < r.header->max_roots && slot == nullptr; ++i) {
    if (r.roots[i].state.load() == RootState::kFree) slot = &r.roots[i];
  }
  void* mem = slot ? alloc_aligned(size ? size : 1, align < 16 ? 16 : align) : nullptr;
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
      free(r.data + e->offset);
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
  lock_roots(r);
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
  for (uint32_t i = 0; i < r.header->max_roots; ++i) {
    RootEntry& e = r.roots[i];
    if (e.state.load(std::memory_order_acquire) != RootState::kReady) continue;
    out.push_back({std::string(e.name, e.name_len), e.offset, e.size, e.type});
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
