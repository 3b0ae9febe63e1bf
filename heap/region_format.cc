#include "heap/region_format.h"

#include <sys/random.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <new>

#include "heap/size_class.h"

namespace memd::heap {

// Robust, so that a process killed while holding it does not deadlock the
// others (see roots in region/region.cc); process-shared, as it lives in
// shared memory.
bool init_shared_mutex(pthread_mutex_t* m) {
  pthread_mutexattr_t attr;
  if (pthread_mutexattr_init(&attr) != 0) return false;
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
  int rc = pthread_mutex_init(m, &attr);
  pthread_mutexattr_destroy(&attr);
  return rc == 0;
}

namespace {

RegionGeometry geometry(uint32_t max_pages, const FormatSpec& spec) {
  return RegionGeometry::compute(max_pages, spec.max_owners, spec.max_clients, spec.max_roots);
}

}  // namespace

RegionGeometry region_geometry(size_t reserved_bytes, const FormatSpec& spec) {
  return geometry(region_max_pages(reserved_bytes, spec), spec);
}

uint32_t region_max_pages(size_t reserved_bytes, const FormatSpec& spec) {
  // Each data page costs a page plus its two descriptors.
  uint64_t per_page = kPageSize + sizeof(PackedPageDesc) + sizeof(BlockDesc);
  uint64_t fixed = geometry(0, spec).data_offset + 2 * kPageSize;
  if (reserved_bytes <= fixed) return 0;
  uint64_t pages = (reserved_bytes - fixed) / per_page;
  return static_cast<uint32_t>(std::min<uint64_t>(pages, UINT32_MAX - 1));
}

bool region_format(MemorySource& source, const FormatSpec& spec) {
  uint32_t max_pages = region_max_pages(source.reserved_bytes(), spec);
  RegionGeometry g = geometry(max_pages, spec);
  if (max_pages == 0 || g.total_bytes > source.reserved_bytes() || !params_valid(spec.params)) {
    errno = max_pages == 0 ? ENOMEM : EINVAL;
    return false;
  }
  // The header, the slots, the roots and the whole page-descriptor table: a
  // free() may look up any page of the reservation; untouched entries cost
  // nothing.
  if (!source.commit(0, g.block_desc_offset)) return false;
  auto* h = new (source.base()) RegionHeader{};
  h->version = kFormatVersion;
  h->page_size = kPageSize;
  h->header_bytes = sizeof(RegionHeader);
  h->method = spec.method;
  h->discipline = spec.discipline;
  h->max_pages = max_pages;
  h->max_owners = spec.max_owners;
  h->max_clients = spec.max_clients;
  h->max_roots = spec.max_roots;
  h->slots_offset = g.slots_offset;
  h->lease_offset = g.lease_offset;
  h->roots_offset = g.roots_offset;
  h->page_desc_offset = g.page_desc_offset;
  h->block_desc_offset = g.block_desc_offset;
  h->data_offset = g.data_offset;
  h->total_bytes = g.total_bytes;
  h->preferred_base = reinterpret_cast<uintptr_t>(source.base());
  h->secret = spec.secret;
  h->params = spec.params;
  SizeClasses classes(spec.params);
  h->class_count = classes.last_class() + 1;
  // The table holds the classes below kMaxClassTable, all there were when
  // the header was laid out; those above follow from medium_max, which the
  // region records with its parameters.
  for (uint32_t c = classes.first_class(); c <= classes.last_class() && c < kMaxClassTable; ++c) {
    h->class_sizes[c] = static_cast<uint16_t>(classes.info(c).size);
  }
  if (!init_shared_mutex(&h->roots_lock)) {
    errno = EINVAL;
    return false;
  }
  PageHeapState& s = h->page_heap;
  s.lru_oldest = s.lru_newest = kNoPage;
  std::fill(std::begin(s.dirty.head), std::end(s.dirty.head), kNoPage);
  std::fill(std::begin(s.clean.head), std::end(s.clean.head), kNoPage);
  // The magic goes last: a region is valid only once fully formatted.
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kRegionMagic;
  return true;
}

bool region_format(MemorySource& source, const HeapParams& params, uint32_t max_owners,
                   uint64_t secret) {
  FormatSpec spec;
  spec.params = params;
  spec.max_owners = max_owners;
  spec.secret = secret;
  return region_format(source, spec);
}

FormatError region_validate(const RegionHeader& h, uint64_t object_bytes, char* why, size_t why_size) {
  auto fail = [&](FormatError e, const char* fmt, auto... args) {
    std::snprintf(why, why_size, fmt, args...);
    return e;
  };
  if (object_bytes < sizeof(RegionHeader)) {
    return fail(FormatError::kTooSmall, "%llu bytes: too short to hold a region header (%zu bytes)",
                static_cast<unsigned long long>(object_bytes), sizeof(RegionHeader));
  }
  if (h.magic != kRegionMagic) {
    return fail(FormatError::kNotARegion, "not a memd region (magic %016llx, expected %016llx)",
                static_cast<unsigned long long>(h.magic), static_cast<unsigned long long>(kRegionMagic));
  }
  bool upgradable = h.version >= kOldestUpgradableVersion && h.version < kFormatVersion;
  if (h.version != kFormatVersion && !upgradable) {
    return fail(FormatError::kVersion, "region format version %u; this build reads version %u%s", h.version,
                kFormatVersion, h.version < kFormatVersion ? " (and upgrades older ones from version 2)" : "");
  }
  if (h.page_size != kPageSize) {
    return fail(FormatError::kPageSize, "region made with %u-byte pages; this build uses %zu",
                h.page_size, kPageSize);
  }
  if (h.header_bytes != sizeof(RegionHeader)) {
    return fail(FormatError::kIncompatible, "region header is %u bytes; this build's is %zu",
                h.header_bytes, sizeof(RegionHeader));
  }
  if (!params_valid(h.params)) return fail(FormatError::kIncompatible, "region heap parameters are invalid");
  SizeClasses classes(h.params);
  if (h.class_count != classes.last_class() + 1 || h.class_count > kMaxSegregatedClasses) {
    return fail(FormatError::kIncompatible, "region has %u size classes; its parameters give %u",
                h.class_count, classes.last_class() + 1);
  }
  for (uint32_t c = classes.first_class(); c <= classes.last_class() && c < kMaxClassTable; ++c) {
    if (h.class_sizes[c] != classes.info(c).size) {
      return fail(FormatError::kIncompatible, "size class %u is %u bytes in the region, %u in this build",
                  c, h.class_sizes[c], classes.info(c).size);
    }
  }
  if (h.max_owners == 0 || h.max_owners > kMaxOwnerSlots || h.max_pages == 0 ||
      h.max_pages >= UINT32_MAX) {
    return fail(FormatError::kCorrupt, "region header counts out of range (owners %u, pages %u)",
                h.max_owners, h.max_pages);
  }
  RegionGeometry g = RegionGeometry::compute(h.max_pages, h.max_owners, h.max_clients, h.max_roots);
  if (g.slots_offset != h.slots_offset || g.lease_offset != h.lease_offset ||
      g.roots_offset != h.roots_offset || g.page_desc_offset != h.page_desc_offset ||
      g.block_desc_offset != h.block_desc_offset || g.data_offset != h.data_offset ||
      g.total_bytes != h.total_bytes) {
    return fail(FormatError::kCorrupt, "region table offsets do not match its counts");
  }
  uint32_t committed = h.page_heap.committed_pages.load(std::memory_order_relaxed);
  if (committed > h.max_pages || h.page_heap.table_pages > h.max_pages) {
    return fail(FormatError::kCorrupt, "region says %u pages are in use of %u", committed, h.max_pages);
  }
  // The object may be shorter than the reservation (it grows online), but
  // never shorter than the tables. Data pages past its end are checked by
  // the owner at open (pages in use there mean it was cut).
  if (object_bytes < h.data_offset) {
    return fail(FormatError::kTruncated, "truncated: %llu bytes, the region's tables need %llu",
                static_cast<unsigned long long>(object_bytes),
                static_cast<unsigned long long>(h.data_offset));
  }

  if (upgradable) {
    return fail(FormatError::kUpgradable,
                "region format version %u; this build reads version %u and upgrades the region in place "
                "when its owner opens it (the daemon, or Region::open), with no older client attached",
                h.version, kFormatVersion);
  }
  return FormatError::kOk;
}

uint64_t random_secret() {
  uint64_t s = 0;
  if (getrandom(&s, sizeof s, GRND_NONBLOCK) != sizeof s) {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    s = (uint64_t(ts.tv_nsec) << 32) ^ uint64_t(ts.tv_sec) ^ reinterpret_cast<uintptr_t>(&s);
  }
  return s | 1;  // never zero: a zero tag would match fresh memory
}

}  // namespace memd::heap
