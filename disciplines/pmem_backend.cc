// The pmem discipline's use of PMDK's libpmem. libpmem maps a file with
// MAP_SYNC where the file system is DAX (then stores are made durable by
// flushing CPU caches from user space: pmem_persist) and with a plain shared
// mapping elsewhere (then only msync makes them durable: pmem_msync). Which
// of the two happened is reported as is_pmem.
#include <libpmem.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "disciplines/shared_internal.h"

namespace memd::disciplines::internal {

absl::StatusOr<PmemMapping> pmem_map_whole(int fd, std::string_view object) {
  PmemMapping m;
  size_t mapped = 0;
  int is_pmem = 0;
  // libpmem maps by path only. The path the object was opened by may since
  // have been removed or replaced; /proc/self/fd/N always reopens the very
  // file behind our descriptor.
  const std::string path = absl::StrCat("/proc/self/fd/", fd);
  // Length 0 without PMEM_FILE_CREATE: map the existing file whole. The
  // object was created (sparse, at its final length) by open().
  void* p = pmem_map_file(path.c_str(), 0, 0, 0, &mapped, &is_pmem);
  if (p == nullptr) {
    int error = errno;
    return absl::ErrnoToStatus(error, absl::StrCat(as_absl(object), ": cannot map through libpmem (",
                                                   pmem_errormsg(), ")"));
  }
  m.base = static_cast<char*>(p);
  m.length = mapped;
  m.is_pmem = is_pmem != 0;
  return m;
}

void pmem_unmap_whole(char* base, size_t length) { pmem_unmap(base, length); }

bool pmem_make_durable(const char* addr, size_t len, bool is_pmem) {
  if (is_pmem) {
    pmem_persist(addr, len);  // cache flushes and a fence: cannot fail
    return true;
  }
  return pmem_msync(addr, len) == 0;
}

}  // namespace memd::disciplines::internal
