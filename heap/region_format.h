// Laying out a fresh region, and validating one found in a file or shared
// memory object before trusting any of it. See docs/region-format.md.
#pragma once

#include <pthread.h>

#include <cstddef>
#include <cstdint>

#include "heap/layout.h"
#include "heap/memory_source.h"

namespace memd::heap {

struct FormatSpec {
  HeapParams params;
  uint32_t max_owners = 64;
  uint32_t max_clients = 0;  // lease slots: 0 for a process-private region
  uint32_t max_roots = 0;
  uint32_t method = 1;       // memd::Method (recorded, not interpreted here)
  uint32_t discipline = 0;   // memd::Discipline (recorded)
  uint64_t secret = 1;       // random: tags freed objects
};

// Makes `m` the kind of mutex a region keeps (the roots lock): robust,
// recursive, process-shared. False if pthread refuses.
bool init_shared_mutex(pthread_mutex_t* m);

// Data pages a reservation of `reserved_bytes` can hold with the tables `spec` asks for.
uint32_t region_max_pages(size_t reserved_bytes, const FormatSpec& spec);
// Where region_format puts the parts of such a region: a backing object must
// be at least data_offset long (the tables) before the first data page.
RegionGeometry region_geometry(size_t reserved_bytes, const FormatSpec& spec);

// Lays out a fresh region over the whole of `source`: header, tables, no
// data pages yet. Returns false (errno set) if the source cannot commit the
// header and tables.
bool region_format(MemorySource& source, const FormatSpec& spec);
// The process-private form (no leases, no roots).
bool region_format(MemorySource& source, const HeapParams& params, uint32_t max_owners,
                   uint64_t secret);

enum class FormatError {
  kOk = 0,
  kTooSmall,       // shorter than a header
  kNotARegion,     // wrong magic
  kVersion,        // another format version (newer, or older than this build upgrades)
  kUpgradable,     // an older version its owner can upgrade in place (region_upgrade.h)
  kPageSize,       // made with another page size
  kIncompatible,   // header size, size classes or parameters this build cannot run
  kCorrupt,        // offsets or counts that do not fit together
  kTruncated,      // the object is shorter than the region's tables
};

// Checks the header `h` of an object `object_bytes` long. On error writes a
// message (naming the field, what was found and what was expected) to `why`.
// Only the first sizeof(RegionHeader) bytes are read. A region of an older
// version this build can upgrade is checked like a current one and is
// kUpgradable when all else is right (with a message saying who can
// upgrade it): usable only after region_upgrade.
FormatError region_validate(const RegionHeader& h, uint64_t object_bytes, char* why, size_t why_size);

// A random, nonzero secret for a new region's free tags (FormatSpec::secret),
// also good as a process-unique id.
uint64_t random_secret();

}  // namespace memd::heap
