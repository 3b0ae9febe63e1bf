// The C API over memd::Region: a memd_region* is a memd::Region*.
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>

#include "client/memd_region.h"
#include "client/status_errno.h"
#include "region/call_site.h"
#include "region/region.h"

namespace {

using memd::client::errno_of;

memd::Region* cast(memd_region* r) { return reinterpret_cast<memd::Region*>(r); }

memd_region* give(absl::StatusOr<std::unique_ptr<memd::Region>> r) {
  if (!r.ok()) {
    errno = errno_of(r.status());
    return nullptr;
  }
  return reinterpret_cast<memd_region*>(r->release());
}

int result(const absl::Status& s) {
  if (s.ok()) return 0;
  errno = errno_of(s);
  return -1;
}

static_assert(MEMD_SHM == static_cast<int>(memd::Discipline::kShm));
static_assert(MEMD_FILE == static_cast<int>(memd::Discipline::kFile));
static_assert(MEMD_PMEM == static_cast<int>(memd::Discipline::kPmem));
static_assert(MEMD_METHOD_ANY == 0);
static_assert(MEMD_BEST == static_cast<int>(memd::Method::kBest));
static_assert(MEMD_POOL == static_cast<int>(memd::Method::kPool));
static_assert(MEMD_LAST == static_cast<int>(memd::Method::kLast));
static_assert(MEMD_DEBUG == static_cast<int>(memd::Method::kDebug));
static_assert(MEMD_PROFILE == static_cast<int>(memd::Method::kProfile));

// The C API's method number (0: as created), or nullopt.
std::optional<memd::Method> method_of(int m) {
  if (m < 0) return std::nullopt;
  return memd::method_from_number(static_cast<uint64_t>(m));
}

// The C API's discipline number, or nullopt (unspecified is not one here).
std::optional<memd::Discipline> discipline_of(int d) {
  if (d <= 0) return std::nullopt;
  std::optional<memd::Discipline> got = memd::discipline_from_number(static_cast<uint64_t>(d));
  if (got && *got == memd::Discipline{}) return std::nullopt;
  return got;
}

bool books_kept(const memd::Region* r) {
  return r->method() == memd::Method::kDebug || r->method() == memd::Method::kProfile;
}

}  // namespace

extern "C" {

memd_region* memd_region_create(const char* name, int discipline, size_t max_bytes) {
  return memd_region_create_method(name, discipline, MEMD_BEST, max_bytes);
}

memd_region* memd_region_create_method(const char* name, int discipline, int method, size_t max_bytes) {
  std::optional<memd::Method> m = method_of(method);
  if (name == nullptr || !discipline_of(discipline) || !m) {
    errno = EINVAL;
    return nullptr;
  }
  memd::RegionOptions o;
  o.discipline = *discipline_of(discipline);
  o.method = *m == memd::Method{} ? memd::Method::kBest : *m;
  if (max_bytes != 0) o.max_bytes = max_bytes;
  return give(memd::Region::create(name, o));
}

memd_region* memd_region_create_private(int method, size_t max_bytes) {
  std::optional<memd::Method> m = method_of(method);
  if (!m) {
    errno = EINVAL;
    return nullptr;
  }
  memd::RegionOptions o;
  o.method = *m == memd::Method{} ? memd::Method::kBest : *m;
  if (max_bytes != 0) o.max_bytes = max_bytes;
  return give(memd::Region::create_private(o));
}

memd_region* memd_region_open(const char* name, int discipline) {
  return memd_region_open_method(name, discipline, MEMD_METHOD_ANY);
}

memd_region* memd_region_open_method(const char* name, int discipline, int method) {
  std::optional<memd::Method> m = method_of(method);
  if (name == nullptr || !discipline_of(discipline) || !m) {
    errno = EINVAL;
    return nullptr;
  }
  return give(memd::Region::open(name, *discipline_of(discipline), *m));
}

memd_region* memd_region_attach(const char* name, int discipline, const char* socket_path, int read_only) {
  if (name == nullptr || !discipline_of(discipline) || (socket_path == nullptr && !read_only)) {
    errno = EINVAL;
    return nullptr;
  }
  return give(memd::Region::attach(name, *discipline_of(discipline),
                                   socket_path ? socket_path : "", read_only != 0));
}

int memd_region_serve(memd_region* region, const char* socket_path) {
  if (socket_path == nullptr) {
    errno = EINVAL;
    return -1;
  }
  return result(cast(region)->serve(socket_path));
}

void memd_region_close(memd_region* region) { delete cast(region); }

int memd_region_remove(const char* name, int discipline) {
  if (name == nullptr || !discipline_of(discipline)) {
    errno = EINVAL;
    return -1;
  }
  return result(memd::Region::remove(name, *discipline_of(discipline)));
}

int memd_region_method(memd_region* region) { return static_cast<int>(cast(region)->method()); }
int memd_region_clear(memd_region* region) { return result(cast(region)->clear()); }
size_t memd_region_size(memd_region* region, const void* p) { return cast(region)->size(p); }

int memd_region_debug_flags(memd_region* region, int flags) {
  memd::Region* r = cast(region);
  if (!books_kept(r) || (flags & ~(MEMD_DEBUG_CHECK | MEMD_DEBUG_ABORT)) != 0) {
    errno = EINVAL;
    return -1;
  }
  r->set_debug_options({(flags & MEMD_DEBUG_CHECK) != 0, (flags & MEMD_DEBUG_ABORT) != 0});
  return 0;
}

int memd_region_watch(memd_region* region, const void* address) {
  memd::Region* r = cast(region);
  if (r->method() != memd::Method::kDebug) {
    errno = EINVAL;
    return -1;
  }
  if (!r->watch(address)) {
    errno = ENOSPC;
    return -1;
  }
  return 0;
}

int memd_region_check_objects(memd_region* region) {
  int n = cast(region)->check_objects();
  if (n < 0) errno = EINVAL;
  return n;
}

int memd_region_write_profile(memd_region* region, int fd) { return result(cast(region)->write_profile(fd)); }

// The debug and profile methods name a call by its site: here, the C
// caller's return address, not this file's.
void* memd_region_alloc(memd_region* region, size_t size) {
  memd::Region* r = cast(region);
  // The program's call site, not this entry point, starts a call chain (see memd_alloc).
  const void* caller = __builtin_return_address(0);
  if (!books_kept(r)) return r->alloc_as(size, caller, __builtin_dwarf_cfa());
  memd::region::CallSiteScope at(memd::heap::DebugSite{nullptr, 0, caller});
  return r->alloc(size);
}
void* memd_region_calloc(memd_region* region, size_t count, size_t size) {
  size_t total;
  return memd::client::bytes_of(count, size, &total) ? cast(region)->alloc_zeroed(total) : nullptr;
}

void memd_region_free(memd_region* region, void* p) {
  memd::Region* r = cast(region);
  if (!books_kept(r)) return r->free(p);
  memd::region::CallSiteScope at(memd::heap::DebugSite{nullptr, 0, __builtin_return_address(0)});
  r->free(p);
}
size_t memd_region_alloc_batch(memd_region* region, size_t n, size_t size, void** out) {
  memd::Region* r = cast(region);
  if (!books_kept(r)) return r->alloc_batch(n, size, out);
  memd::region::CallSiteScope at(memd::heap::DebugSite{nullptr, 0, __builtin_return_address(0)});
  return r->alloc_batch(n, size, out);
}
void* memd_region_alloc_near(memd_region* region, size_t size, const void* hint, size_t near_bytes) {
  memd::Region* r = cast(region);
  if (!books_kept(r)) return r->alloc_near(size, hint, near_bytes);
  memd::region::CallSiteScope at(memd::heap::DebugSite{nullptr, 0, __builtin_return_address(0)});
  return r->alloc_near(size, hint, near_bytes);
}
void memd_region_free_batch(memd_region* region, void* const* p, size_t n) {
  memd::Region* r = cast(region);
  if (!books_kept(r)) return r->free_batch(p, n);
  memd::region::CallSiteScope at(memd::heap::DebugSite{nullptr, 0, __builtin_return_address(0)});
  r->free_batch(p, n);
}
int memd_region_set_chain_pools(memd_region* region, int on) {
  memd::Region* r = cast(region);
  if (on != 0 && on != 1) {
    errno = EINVAL;
    return -1;
  }
  if (r->method() != memd::Method::kBest) {
    errno = ENOTSUP;
    return -1;
  }
  r->set_chain_pools(on != 0);
  return 0;
}
void* memd_region_resize(memd_region* region, void* p, size_t size) {
  memd::Region* r = cast(region);
  if (!books_kept(r)) return r->resize(p, size);
  memd::region::CallSiteScope at(memd::heap::DebugSite{nullptr, 0, __builtin_return_address(0)});
  return r->resize(p, size);
}
uint64_t memd_region_offset(memd_region* region, const void* p) { return cast(region)->offset_of(p); }
void* memd_region_at(memd_region* region, uint64_t offset) { return cast(region)->at(offset); }

void* memd_region_root(memd_region* region, const char* name, size_t size, int* created) {
  if (name == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  bool made = false;
  void* p = cast(region)->root_bytes(name, size, &made);
  if (created != nullptr) *created = made;
  return p;
}

void* memd_region_find(memd_region* region, const char* name) {
  if (name == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  return cast(region)->find_bytes(name);
}

int memd_region_persist(memd_region* region, const void* p, size_t n) { return result(cast(region)->persist(p, n)); }
int memd_region_checkpoint(memd_region* region) { return result(cast(region)->checkpoint()); }

void* memd_region_reserve(memd_region* region, size_t size) { return cast(region)->reserve(size); }
int memd_region_publish(memd_region* region, void* object, uint64_t* link, uint64_t value) {
  // The C side's word, as the atomic the publish stores with (the same
  // representation: std::atomic<uint64_t> is lock-free and standard layout).
  static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t));
  return result(cast(region)->publish(object, reinterpret_cast<std::atomic<uint64_t>*>(link), value));
}
int memd_region_cancel(memd_region* region, void* object) { return result(cast(region)->cancel(object)); }

int memd_region_publish_batch(memd_region* region, const memd_publish_item* items, size_t n) {
  if (n > memd::Region::kMaxPublishBatch || (n != 0 && items == nullptr)) {
    errno = EINVAL;
    return -1;
  }
  memd::Region::PublishItem batch[memd::Region::kMaxPublishBatch];
  for (size_t i = 0; i < n; ++i) {
    batch[i] = {items[i].object, reinterpret_cast<std::atomic<uint64_t>*>(items[i].link), items[i].value};
  }
  return result(cast(region)->publish(batch, n));
}

int memd_region_check(memd_region* region, char* message, size_t message_size) {
  absl::Status s = cast(region)->check();
  if (s.ok()) return 0;
  if (message != nullptr && message_size > 0) {
    std::string m(s.message());
    std::strncpy(message, m.c_str(), message_size - 1);
    message[message_size - 1] = '\0';
  }
  errno = EIO;
  return -1;
}

}  // extern "C"
