// The one interface through which the heap reaches memory. A discipline
// (disciplines/) implements it for anonymous memory, shared memory objects,
// mapped files and pmem. Data-plane contract: no exceptions, no allocation;
// failure is `false` with errno set.
#pragma once

#include <cstddef>

namespace memd::heap {

class MemorySource {
 public:
  virtual ~MemorySource() = default;

  // The reserved span [base(), base() + reserved_bytes()). Only committed
  // parts may be touched. The base never moves while the source lives.
  virtual char* base() const = 0;
  virtual size_t reserved_bytes() const = 0;

  // Makes [offset, offset + len) readable and writable; it reads as zero the
  // first time. REQUIRES: page-aligned arguments inside the reservation.
  virtual bool commit(size_t offset, size_t len) = 0;

  // Gives [offset, offset + len) back to the system; it reads as zero after.
  virtual bool discard(size_t offset, size_t len) = 0;

  // Makes a discarded range usable again. Shared objects must allocate
  // backing again (a punched hole on a full file system would SIGBUS at
  // first write); anonymous memory needs nothing.
  virtual bool recommit(size_t offset, size_t len) { return true; }

  // Whether backing is better allocated page run by page run as the heap
  // hands them out (shared objects: fallocate takes real disk or RAM at
  // once) than in large steps as the heap grows (anonymous memory: an
  // mprotect costs nothing until pages are touched). If true, the heap's
  // growth commits nothing and every use of a never-used run recommits it.
  virtual bool commits_on_use() const { return false; }

  // Moves the pages of [from, from + len) to [to, to + len) by remapping
  // them, without copying a byte; [from, from + len) reads as zero after.
  // False, with nothing changed, if this source cannot (shared memory: its
  // pages are the object's, at fixed offsets). REQUIRES: page-aligned,
  // committed, non-overlapping ranges the caller holds.
  virtual bool move(size_t from, size_t to, size_t len) { return false; }

  // Makes [offset, offset + len) durable (no-op for volatile memory).
  virtual bool persist(size_t offset, size_t len) { return true; }

  // Online growth of a backing object shorter than the reservation: makes
  // the bytes below `end` exist (still uncommitted) before the heap hands
  // out any page there. False, errno set, if the object may not grow (a
  // quota, a file size limit). Memory without an object has nothing to do.
  virtual bool extend(size_t end) { return true; }
  // Cuts the backing object to `end` bytes, giving the tail back. REQUIRES:
  // nothing uses a byte past `end`. False if the source cannot (or the
  // object is no longer than `end`): the tail then simply stays.
  virtual bool shrink(size_t end) { return false; }
};

}  // namespace memd::heap
