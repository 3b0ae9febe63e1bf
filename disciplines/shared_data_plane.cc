// The shared sources' data plane: commit, discard, persist. Called by the
// heap with its locks held, so: no exceptions, no allocation, no blocking
// beyond the system call itself; failure is `false` with errno.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>

#include "disciplines/shared_internal.h"
#include "disciplines/shared_source.h"

namespace memd::disciplines {
namespace {

constexpr size_t kPageMask = kSharedPageSize - 1;

// fallocate, retried when a signal interrupts it (tmpfs checks for pending
// signals between pages and gives up with EINTR). 0 or an errno value.
int fallocate_range(int fd, int mode, size_t offset, size_t len) {
  while (fallocate(fd, mode, static_cast<off_t>(offset), static_cast<off_t>(len)) != 0) {
    if (errno != EINTR) return errno;
  }
  return 0;
}

}  // namespace

void SharedSource::fire(SourceEvent event, const char* what, size_t offset, size_t length, int error) const {
  if (handler_ != nullptr) handler_(handler_context_, SourceEventInfo{event, what, offset, length, error});
}

bool SharedSource::check_writable_range(size_t offset, size_t len) const {
  if (read_only_) {
    errno = EROFS;
    return false;
  }
  if (base_ == nullptr) {
    errno = EINVAL;  // not mapped yet
    return false;
  }
  if (((offset | len) & kPageMask) != 0) {
    fire(SourceEvent::kBadAddress, "range is not page-aligned", offset, len, EINVAL);
    errno = EINVAL;
    return false;
  }
  if (offset > mapped_ || len > mapped_ - offset) {
    fire(SourceEvent::kBadAddress, "range is outside the object", offset, len, ENOMEM);
    errno = ENOMEM;  // as the anonymous discipline: past the reservation
    return false;
  }
  return true;
}

bool SharedSource::commit(size_t offset, size_t len) {
  if (!check_writable_range(offset, len)) return false;
  if (len == 0) return true;
  // Mode 0 rather than FALLOC_FL_KEEP_SIZE: the range lies inside the
  // object's length, so the size is unchanged either way, except when someone
  // shrank the object behind our back; then mode 0 brings the committed range
  // back inside the file instead of leaving it to SIGBUS.
  int error = fallocate_range(fd_, 0, offset, len);
  if (error == EOPNOTSUPP) {
    // No fallocate on this file system: glibc then writes one zero byte per
    // block that reads as zero. Safe here: a range being committed holds no
    // live data, so no concurrent store can be overwritten.
    error = posix_fallocate(fd_, static_cast<off_t>(offset), static_cast<off_t>(len));
  }
  if (error == 0) return true;
  const bool full = error == ENOSPC || error == EDQUOT;
  fire(SourceEvent::kNoMemory, full ? "commit: the file system is full" : "commit: cannot allocate backing",
       offset, len, error);
  errno = full ? ENOMEM : error;
  return false;
}

bool SharedSource::extend(size_t end) {
  const size_t length = known_length_.load(std::memory_order_relaxed);
  if (end <= length) return true;
  if (read_only_ || base_ == nullptr) {
    errno = read_only_ ? EROFS : EINVAL;
    return false;
  }
  auto refuse = [&](const char* what, int error) {
    fire(SourceEvent::kNoMemory, what, length, end - length, error);
    errno = error;
    return false;
  };
  if (end > mapped_ || (end & kPageMask) != 0) return refuse("grow: past the region's reservation", ENOMEM);
  // Past RLIMIT_FSIZE, ftruncate would also raise SIGXFSZ, whose default
  // action ends the process: refuse before asking.
  struct rlimit limit;
  if (getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY && end > limit.rlim_cur) {
    return refuse("grow: past the process's file size limit (RLIMIT_FSIZE)", EFBIG);
  }
  if (policy_ != nullptr && !policy_(policy_context_, length, end)) {
    return refuse("grow: refused by the quota", EDQUOT);
  }
  while (ftruncate(fd_, static_cast<off_t>(end)) != 0) {
    if (errno == EINTR) continue;
    int error = errno;
    if (policy_ != nullptr) policy_(policy_context_, end, length);  // hand the quota back
    return refuse("grow: cannot lengthen the object", error);
  }
  known_length_.store(end, std::memory_order_relaxed);
  if (required_.load(std::memory_order_relaxed) < end) required_.store(end, std::memory_order_relaxed);
  return true;
}

bool SharedSource::shrink(size_t end) {
  const size_t length = known_length_.load(std::memory_order_relaxed);
  if (kind_ == DisciplineKind::kPmem || read_only_ || base_ == nullptr || end >= length || (end & kPageMask) != 0) {
    return false;
  }
  // What this process relies on comes down first: a backing_status call
  // meanwhile must not find the shorter object "truncated".
  if (required_.load(std::memory_order_relaxed) > end) required_.store(end, std::memory_order_relaxed);
  while (ftruncate(fd_, static_cast<off_t>(end)) != 0) {
    if (errno != EINTR) return false;
  }
  if (policy_ != nullptr) policy_(policy_context_, length, end);
  known_length_.store(end, std::memory_order_relaxed);
  return true;
}

bool SharedSource::discard(size_t offset, size_t len) {
  if (!check_writable_range(offset, len)) return false;
  if (len == 0) return true;
  // A hole drops the pages from the page cache and from every process's
  // mapping; MADV_DONTNEED would only drop this process's view of them.
  int error = fallocate_range(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, len);
  if (error == EOPNOTSUPP) {
    if (madvise(base_ + offset, len, MADV_REMOVE) == 0) return true;
    error = errno;
  }
  if (error == 0) return true;
  errno = error;
  return false;
}

bool SharedSource::persist(size_t offset, size_t len) {
  if (base_ == nullptr) {
    errno = EINVAL;
    return false;
  }
  if (offset > mapped_ || len > mapped_ - offset) {
    fire(SourceEvent::kBadAddress, "persist: range is outside the object", offset, len, ENOMEM);
    errno = ENOMEM;
    return false;
  }
  if (len == 0) return true;
  // Out to whole pages: msync wants an aligned start, and the mapping is
  // whole pages, so the rounded end stays inside it.
  const size_t start = offset & ~kPageMask;
  const size_t end = (offset + len + kPageMask) & ~kPageMask;
  switch (kind_) {
    case DisciplineKind::kShm:
      return true;  // tmpfs is volatile: there is nowhere more durable to go
    case DisciplineKind::kFile:
      return msync(base_ + start, end - start, MS_SYNC) == 0;
    case DisciplineKind::kPmem:
      // Cache flushes cover the exact range (a line at a time); pmem_msync
      // aligns its start itself.
      return internal::pmem_make_durable(base_ + offset, len, is_pmem_);
    case DisciplineKind::kAnonymous:
      break;
  }
  return true;
}

}  // namespace memd::disciplines
