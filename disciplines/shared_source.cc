// Setting up a shared source: opening or creating the backing object,
// reading it before it is mapped, mapping it, taking ownership, closing.
// The data-plane calls live in shared_data_plane.cc.
#include "disciplines/shared_source.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <optional>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "disciplines/fault_guard.h"
#include "disciplines/shared_internal.h"

namespace memd::disciplines {
namespace {

// The checks a new object's length must pass, against the discipline's limit.
absl::Status check_new_length(DisciplineKind kind, std::string_view name, const std::string& object,
                              size_t length) {
  if (length == 0) return absl::InvalidArgumentError(absl::StrCat(object, ": length is 0"));
  if (length % kSharedPageSize != 0) {
    return absl::InvalidArgumentError(absl::StrCat(object, ": length ", length,
                                                   " is not a multiple of ", kSharedPageSize));
  }
  absl::StatusOr<size_t> limit = discipline_limit(kind, name);
  if (!limit.ok()) {
    return absl::Status(limit.status().code(), absl::StrCat(object, ": ", limit.status().message()));
  }
  if (length > *limit) {
    return absl::InvalidArgumentError(
        absl::StrCat(object, ": length ", length, " is over the discipline's limit of ", *limit,
                     " bytes (the smaller of 1 TiB and the size of the file system)"));
  }
  return absl::OkStatus();
}

int open_object(DisciplineKind kind, std::string_view name, int flags, mode_t mode) {
  if (kind == DisciplineKind::kShm) {
    return shm_open(internal::shm_object_name(name).c_str(), flags, mode);
  }
  return ::open(std::string(name).c_str(), flags | O_CLOEXEC, mode);
}

void unlink_object(DisciplineKind kind, std::string_view name) {
  if (kind == DisciplineKind::kShm) {
    shm_unlink(internal::shm_object_name(name).c_str());
  } else {
    unlink(std::string(name).c_str());
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<SharedSource>> SharedSource::open(DisciplineKind kind, std::string_view name,
                                                                 const SharedSourceOptions& options) {
  if (absl::Status s = internal::validate_name(kind, name); !s.ok()) return s;
  const std::string object = internal::describe_object(kind, name);
  if (options.create && options.read_only) {
    return absl::InvalidArgumentError(absl::StrCat(object, ": cannot create an object read-only"));
  }
  if (options.create) {
    if (absl::Status s = check_new_length(kind, name, object, options.length); !s.ok()) return s;
  }

  int flags = options.read_only ? O_RDONLY : O_RDWR;
  if (options.create) flags |= O_CREAT | O_EXCL;
  int fd = open_object(kind, name, flags, options.mode);
  if (fd < 0) {
    return internal::errno_status(errno, object, options.create ? "cannot create" : "cannot open");
  }
  // From here on a failure closes the descriptor, and removes the object if
  // this call created it: a half-made object would block the next create.
  auto fail = [&](int error, std::string_view doing) {
    if (options.create) unlink_object(kind, name);
    close(fd);
    return internal::errno_status(error, object, doing);
  };

  if (options.create) {
    // The mode exactly as asked: who may share a region is the caller's
    // decision, not the umask's.
    if (fchmod(fd, options.mode) != 0) return fail(errno, "cannot set its mode");
    // Its first length, as a sparse object: it grows later (extend) up to
    // its reservation, and backing comes range by range from commit().
    // libpmem maps a file whole, at its length: pmem starts at its reservation.
    size_t initial = options.initial_length == 0 || kind == DisciplineKind::kPmem
                         ? options.length
                         : std::min(options.initial_length, options.length);
    if (initial % kSharedPageSize != 0) {
      close(fd);
      unlink_object(kind, name);
      return absl::InvalidArgumentError(absl::StrCat(object, ": initial length ", initial,
                                                     " is not a multiple of ", kSharedPageSize));
    }
    if (ftruncate(fd, static_cast<off_t>(initial)) != 0) return fail(errno, "cannot set its length");
  }
  struct stat st;
  if (fstat(fd, &st) != 0) return fail(errno, "cannot stat");
  // Directories, devices and pipes cannot be sized, punched or allocated.
  // (This also leaves out device DAX: fallocate does not work there.)
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(object, ": not a regular file"));
  }
  return std::unique_ptr<SharedSource>(
      new SharedSource(kind, std::string(name), fd, options.read_only, options.create));
}

namespace {

// The mappings this process's SharedSources hold. A forked child starts
// with none: what it inherited belongs to objects it must not use, so it may
// map over those (and only those).
constexpr int kMaxLive = 128;
std::atomic<uintptr_t> live_mappings[kMaxLive];

void forget_live_in_child() {
  for (auto& m : live_mappings) m.store(0, std::memory_order_relaxed);
}

void add_live(const void* base) {
  static const bool hooked = [] { return pthread_atfork(nullptr, nullptr, forget_live_in_child) == 0; }();
  (void)hooked;
  for (auto& m : live_mappings) {
    uintptr_t empty = 0;
    if (m.compare_exchange_strong(empty, reinterpret_cast<uintptr_t>(base))) return;
  }
}

void remove_live(const void* base) {
  for (auto& m : live_mappings) {
    uintptr_t want = reinterpret_cast<uintptr_t>(base);
    if (m.compare_exchange_strong(want, 0)) return;
  }
}

bool is_live(const void* base) {
  for (auto& m : live_mappings) {
    if (m.load(std::memory_order_relaxed) == reinterpret_cast<uintptr_t>(base)) return true;
  }
  return false;
}

}  // namespace

SharedSource::~SharedSource() {
  if (base_ != nullptr) {
    unguard_range(guard_);
    remove_live(base_);
    fire(SourceEvent::kClose, "close: unmapping the object", 0, mapped_, 0);
    if (mapped_by_pmem_) {
      internal::pmem_unmap_whole(base_, mapped_);
    } else {
      munmap(base_, mapped_);
    }
  }
  if (fd_ >= 0) close(fd_);
}

std::string SharedSource::describe() const { return internal::describe_object(kind_, name_); }

size_t SharedSource::length() const {
  struct stat st;
  if (fstat(fd_, &st) != 0) return 0;
  return static_cast<size_t>(st.st_size);
}

absl::Status SharedSource::backing_status() const {
  size_t first = 0;
  if (uint64_t faults = range_faults(guard_, &first); faults != 0) {
    return absl::DataLossError(absl::StrCat(describe(), ": ", faults, " page fault(s) found no backing (first at offset ",
                                            first, "): the object was truncated or its file system is full"));
  }
  struct stat st;
  if (fstat(fd_, &st) != 0) return internal::errno_status(errno, describe(), "cannot stat");
  if (const size_t required = required_length(); static_cast<size_t>(st.st_size) < required) {
    return absl::DataLossError(absl::StrCat(describe(), ": truncated to ", st.st_size, " bytes of ", required));
  }
  return absl::OkStatus();
}

absl::Status SharedSource::read(size_t offset, void* out, size_t len) const {
  char* to = static_cast<char*>(out);
  size_t done = 0;
  while (done < len) {
    ssize_t n = pread(fd_, to + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return internal::errno_status(errno, describe(), absl::StrCat("cannot read ", len, " bytes at ", offset));
    }
    if (n == 0) {
      return absl::OutOfRangeError(absl::StrCat(describe(), ": ", len, " bytes at ", offset,
                                                " reach past its end (", length(), " bytes)"));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

bool SharedSource::maps_same_object_at(void* address, size_t len) const {
  struct stat st;
  if (fstat(fd_, &st) != 0) return false;
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (f == nullptr) return false;
  // Every line covering [address, address + len) must be a shared mapping
  // of this object at the matching file offset (the kernel may split one
  // mapping into several lines, e.g. after an madvise).
  uintptr_t want = reinterpret_cast<uintptr_t>(address), end = want + len, covered = want;
  char line[512];
  bool ok = true;
  while (ok && covered < end && std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long lo, hi, offset, inode;
    unsigned dev_major, dev_minor;
    char perms[8];
    if (std::sscanf(line, "%lx-%lx %7s %lx %x:%x %lu", &lo, &hi, perms, &offset, &dev_major, &dev_minor,
                    &inode) != 7) {
      continue;
    }
    if (hi <= covered || lo >= end) continue;
    ok = lo == covered && perms[3] == 's' && inode == st.st_ino && offset == covered - want &&
         makedev(dev_major, dev_minor) == st.st_dev;
    covered = hi;
  }
  std::fclose(f);
  return ok && covered >= end;
}

absl::Status SharedSource::map(void* hint, size_t reservation) {
  if (base_ != nullptr) return absl::FailedPreconditionError(absl::StrCat(describe(), ": already mapped"));
  struct stat st;
  if (fstat(fd_, &st) != 0) return internal::errno_status(errno, describe(), "cannot stat");
  size_t object_len = static_cast<size_t>(st.st_size);
  if (object_len == 0) return absl::FailedPreconditionError(absl::StrCat(describe(), ": is empty"));
  // Objects are made in whole pages; a partial last page could not be
  // committed or discarded as the heap expects.
  if (object_len % kSharedPageSize != 0) {
    return absl::FailedPreconditionError(absl::StrCat(describe(), ": length ", object_len,
                                                      " is not a multiple of ", kSharedPageSize));
  }
  if (reservation % kSharedPageSize != 0 || reservation > kMaxSharedObject) {
    return absl::InvalidArgumentError(absl::StrCat(describe(), ": a reservation of ", reservation,
                                                   " bytes is not whole pages of at most ", kMaxSharedObject));
  }
  if (kind_ == DisciplineKind::kPmem && !read_only_ && object_len < reservation) {
    // A file that grew as kFile, opened as pmem: libpmem maps only whole
    // files, so it takes its whole reservation now (sparse: no backing).
    if (ftruncate(fd_, static_cast<off_t>(reservation)) != 0) {
      return internal::errno_status(errno, describe(), "cannot lengthen it to its reservation for libpmem");
    }
    object_len = reservation;
  }
  const size_t len = std::max(object_len, reservation);

  if (kind_ == DisciplineKind::kPmem && !read_only_) {
    // libpmem opens the file read-write itself and picks an address suited to
    // large pages, so the hint cannot be honoured here.
    absl::StatusOr<internal::PmemMapping> m = internal::pmem_map_whole(fd_, describe());
    if (!m.ok()) return m.status();
    if (m->length != len) {
      internal::pmem_unmap_whole(m->base, m->length);
      return absl::AbortedError(absl::StrCat(describe(), ": its length changed while it was mapped"));
    }
    base_ = m->base;
    is_pmem_ = m->is_pmem;
    mapped_by_pmem_ = true;
    at_hint_ = false;
  } else {
    // A read-only pmem file is mapped like any file: pmem_map_file always
    // opens for writing, and a reader has nothing to flush.
    const int prot = read_only_ ? PROT_READ : PROT_READ | PROT_WRITE;
    void* p = MAP_FAILED;
    if (hint != nullptr) {
      p = mmap(hint, len, prot, MAP_SHARED | MAP_FIXED_NOREPLACE, fd_, 0);
      // Kernels before 4.17 take the flag as a mere hint: insist on exactness.
      if (p != MAP_FAILED && p != hint) {
        munmap(p, len);
        p = MAP_FAILED;
      }
    }
    if (p == MAP_FAILED && hint != nullptr && !is_live(hint) && maps_same_object_at(hint, len)) {
      // A forked child still holds its parent's mapping of this very object
      // at the preferred address. Mapping the object over it keeps the same
      // memory where it was, and keeps every process at one address.
      p = mmap(hint, len, prot, MAP_SHARED | MAP_FIXED, fd_, 0);
    }
    at_hint_ = p != MAP_FAILED;
    if (p == MAP_FAILED) p = mmap(nullptr, len, prot, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) return internal::errno_status(errno, describe(), "cannot map");
    base_ = static_cast<char*>(p);
  }
  mapped_ = len;
  known_length_.store(object_len, std::memory_order_relaxed);
  required_.store(object_len, std::memory_order_relaxed);
  add_live(base_);
  guard_ = guard_range(base_, mapped_);
  // A heap touches its pages in no order, so read-around only faults in
  // neighbours nobody asked for. Worse, it builds large folios, and punching
  // a hole that ends inside one (ext4 on recent kernels) only zeroes that
  // part, which is then written back as real blocks: discarded pages would
  // keep their disk space. Single-page folios are punched exactly.
  madvise(base_, mapped_, MADV_RANDOM);
  fire(SourceEvent::kOpen, "open: mapped the object", 0, mapped_, 0);
  return absl::OkStatus();
}

namespace {

// Takes flock `how` (LOCK_EX or LOCK_SH) without waiting. nullopt: taken;
// else another open holds a lock in the way: " (pid N)" naming its process
// where /proc/locks does, "" otherwise.
absl::StatusOr<std::optional<std::string>> try_flock(int fd, int how, const std::string& described) {
  while (flock(fd, how | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) return internal::errno_status(errno, described, "cannot lock");
    pid_t pid = internal::flock_holder(fd);
    return std::optional<std::string>(pid > 0 ? absl::StrCat(" (pid ", pid, ")") : "");
  }
  return std::optional<std::string>();
}

}  // namespace

absl::Status SharedSource::lock_owner() {
  if (read_only_) {
    return absl::FailedPreconditionError(
        absl::StrCat("region ", name_, " was opened read-only; its owner must be able to write"));
  }
  absl::StatusOr<std::optional<std::string>> held = try_flock(fd_, LOCK_EX, describe());
  if (!held.ok()) return held.status();
  if (!*held) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("region ", name_, " already has an owner", **held, ": ", describe(), " is locked"));
}

absl::Status SharedSource::lock_shared() {
  absl::StatusOr<std::optional<std::string>> held = try_flock(fd_, LOCK_SH, describe());
  if (!held.ok()) return held.status();
  if (!*held) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("region ", name_, " is open by its owner", **held, ": stop it first (", describe(), " is locked)"));
}

bool SharedSource::remap_private_in_child() {
  if (base_ == nullptr || fd_ < 0) {
    errno = EBADF;
    return false;
  }
  int prot = read_only_ ? PROT_READ : PROT_READ | PROT_WRITE;
  void* p = mmap(base_, mapped_, prot, MAP_PRIVATE | MAP_FIXED | MAP_NORESERVE, fd_, 0);
  return p == base_;
}

}  // namespace memd::disciplines
