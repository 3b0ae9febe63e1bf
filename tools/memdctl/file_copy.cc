#include "tools/memdctl/file_copy.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace memd::memdctl {
namespace {

absl::Status errno_error(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// The data ranges of `in` (SEEK_DATA/SEEK_HOLE), copied into `out` at the
// same offsets; holes stay holes.
absl::StatusOr<uint64_t> copy_data_ranges(int in, int out, uint64_t length, const std::string& from) {
  uint64_t copied = 0;
  off_t at = 0;
  while (static_cast<uint64_t>(at) < length) {
    off_t data = lseek(in, at, SEEK_DATA);
    if (data < 0) {
      if (errno == ENXIO) break;  // only a hole is left
      return errno_error(absl::StrCat("cannot read ", from));
    }
    off_t hole = lseek(in, data, SEEK_HOLE);
    if (hole < 0) return errno_error(absl::StrCat("cannot read ", from));
    off_t in_at = data, out_at = data;
    while (in_at < hole) {
      ssize_t n = copy_file_range(in, &in_at, out, &out_at, static_cast<size_t>(hole - in_at), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return errno_error(absl::StrCat("cannot copy ", from));
      copied += static_cast<uint64_t>(n);
    }
    at = hole;
  }
  return copied;
}

}  // namespace

absl::StatusOr<CopyResult> copy_region_file(const std::string& from, const std::string& to, bool reflink_only) {
  int in = open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return errno_error(absl::StrCat("cannot open ", from));
  struct stat st {};
  if (fstat(in, &st) != 0) {
    close(in);
    return errno_error(absl::StrCat("cannot stat ", from));
  }
  int out = open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, st.st_mode & 07777);
  if (out < 0) {
    absl::Status s = errno == EEXIST ? absl::AlreadyExistsError(absl::StrCat(to, " exists: memdctl never overwrites"))
                                     : errno_error(absl::StrCat("cannot create ", to));
    close(in);
    return s;
  }
  CopyResult r;
  r.file_bytes = static_cast<uint64_t>(st.st_size);
  absl::Status failed;
  if (ioctl(out, FICLONE, in) == 0) {
    r.reflinked = true;
    r.data_bytes = r.file_bytes;
  } else if (reflink_only) {
    failed = absl::UnimplementedError(absl::StrCat("the file system of ", to, " cannot reflink ", from, " (",
                                                   std::strerror(errno), "): use memdctl file copy"));
  } else if (ftruncate(out, st.st_size) != 0) {
    failed = errno_error(absl::StrCat("cannot size ", to));
  } else {
    absl::StatusOr<uint64_t> copied = copy_data_ranges(in, out, r.file_bytes, from);
    if (copied.ok()) r.data_bytes = *copied;
    else failed = copied.status();
  }
  if (failed.ok() && fsync(out) != 0) failed = errno_error(absl::StrCat("cannot sync ", to));
  close(in);
  close(out);
  if (!failed.ok()) {
    unlink(to.c_str());
    return failed;
  }
  return r;
}

}  // namespace memd::memdctl
