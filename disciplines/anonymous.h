// The anonymous discipline: process-private memory. The whole span is
// reserved once without access (PROT_NONE costs nothing and commits nothing),
// committed in steps with mprotect, and given back with MADV_DONTNEED, after
// which the pages read as zero.
#pragma once

#include <cstddef>

#include "heap/memory_source.h"

namespace memd::disciplines {

class AnonymousSource final : public heap::MemorySource {
 public:
  AnonymousSource() = default;
  AnonymousSource(const AnonymousSource&) = delete;
  AnonymousSource& operator=(const AnonymousSource&) = delete;
  ~AnonymousSource() override;

  // Reserves `bytes` of address space. False with errno on failure.
  bool reserve(size_t bytes);
  // Unmaps everything; the source may be reserved again.
  void release();

  char* base() const override { return base_; }
  size_t reserved_bytes() const override { return bytes_; }
  bool commit(size_t offset, size_t len) override;
  bool discard(size_t offset, size_t len) override;
  // mremap with MREMAP_DONTUNMAP: the page tables move, the old range stays
  // mapped (and reads as zero), so a failure anywhere leaves no hole.
  bool move(size_t from, size_t to, size_t len) override;
  // Asks for transparent huge pages over the whole reservation
  // (MADV_HUGEPAGE). False with errno if the kernel refuses.
  bool advise_huge_pages();

 private:
  char* base_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace memd::disciplines
