#include "disciplines/anonymous.h"

#include <sys/mman.h>

#include <cerrno>

namespace memd::disciplines {

AnonymousSource::~AnonymousSource() { release(); }

bool AnonymousSource::reserve(size_t bytes) {
  release();
  void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  base_ = static_cast<char*>(p);
  bytes_ = bytes;
  return true;
}

void AnonymousSource::release() {
  if (base_ != nullptr) munmap(base_, bytes_);
  base_ = nullptr;
  bytes_ = 0;
}

bool AnonymousSource::commit(size_t offset, size_t len) {
  if (offset > bytes_ || len > bytes_ - offset) {
    errno = ENOMEM;
    return false;
  }
  return mprotect(base_ + offset, len, PROT_READ | PROT_WRITE) == 0;
}

bool AnonymousSource::discard(size_t offset, size_t len) {
  return madvise(base_ + offset, len, MADV_DONTNEED) == 0;
}

bool AnonymousSource::move(size_t from, size_t to, size_t len) {
  if (from > bytes_ || to > bytes_ || len > bytes_ - from || len > bytes_ - to) {
    errno = EINVAL;
    return false;
  }
  void* moved = mremap(base_ + from, len, len, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, base_ + to);
  return moved != MAP_FAILED;
}

bool AnonymousSource::advise_huge_pages() { return madvise(base_, bytes_, MADV_HUGEPAGE) == 0; }

}  // namespace memd::disciplines
