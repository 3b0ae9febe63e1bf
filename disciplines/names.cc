// Naming and sizing of shared objects: which names are acceptable, where an
// object lives, how large it may be, and how it is deleted.
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "disciplines/shared_internal.h"
#include "disciplines/shared_source.h"

namespace memd::disciplines {
namespace {

// What fits in one file name (NAME_MAX, 255) after shm_object_name's
// "memd.": the object's name may carry a prefix (memd's shm namespace)
// before a caller's name, so this is the object's limit, not a user's.
constexpr size_t kMaxRegionName = 255 - (sizeof "memd." - 1);
// Where Linux keeps POSIX shm objects (glibc's shm_open opens files here).
constexpr char kShmDirectory[] = "/dev/shm";

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// The directory that holds (or would hold) the file at `path`.
std::string parent_directory(std::string_view path) {
  size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return ".";
  if (slash == 0) return "/";
  return std::string(path.substr(0, slash));
}

}  // namespace

absl::Status validate_region_name(std::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("region name is empty");
  if (name.size() > kMaxRegionName) {
    return absl::InvalidArgumentError(absl::StrCat("region name is ", name.size(),
                                                   " characters long; at most ", kMaxRegionName,
                                                   " are allowed"));
  }
  for (size_t i = 0; i < name.size(); ++i) {
    if (!is_name_char(name[i])) {
      // Escaped: the name may hold anything, including bytes a terminal acts on.
      return absl::InvalidArgumentError(
          absl::StrCat("region name \"", absl::CHexEscape(internal::as_absl(name)), "\" has a character other than ",
                       "[A-Za-z0-9._-] at position ", i));
    }
  }
  // A leading '.' would make a hidden file in /dev/shm; ".." reads as a
  // path step to anything that later joins the name into a path.
  if (name.front() == '.') {
    return absl::InvalidArgumentError(absl::StrCat("region name \"", internal::as_absl(name), "\" starts with '.'"));
  }
  if (name.find("..") != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("region name \"", internal::as_absl(name), "\" contains \"..\""));
  }
  return absl::OkStatus();
}

absl::Status validate_path(std::string_view path) {
  if (path.empty()) return absl::InvalidArgumentError("path is empty");
  if (path.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("path \"", absl::CHexEscape(internal::as_absl(path)), "\" contains a NUL byte"));
  }
  return absl::OkStatus();
}

namespace internal {

std::string shm_object_name(std::string_view name) { return absl::StrCat("/memd.", as_absl(name)); }

std::string describe_object(DisciplineKind kind, std::string_view name) {
  switch (kind) {
    case DisciplineKind::kShm:
      return absl::StrCat("shm object \"", shm_object_name(name), "\"");
    case DisciplineKind::kFile:
      return absl::StrCat("file \"", as_absl(name), "\"");
    case DisciplineKind::kPmem:
      return absl::StrCat("pmem file \"", as_absl(name), "\"");
    case DisciplineKind::kAnonymous:
      break;
  }
  return "anonymous memory";
}

absl::Status errno_status(int error, std::string_view object, std::string_view doing) {
  absl::Status status = absl::ErrnoToStatus(error, absl::StrCat(as_absl(object), ": ", as_absl(doing)));
  // Abseil calls both of these FAILED_PRECONDITION; for a name handed to us
  // they say "wrong kind of object" and "no such object".
  if (error == EISDIR) return absl::InvalidArgumentError(status.message());
  if (error == ENOTDIR) return absl::NotFoundError(status.message());
  return status;
}

absl::Status validate_name(DisciplineKind kind, std::string_view name) {
  switch (kind) {
    case DisciplineKind::kShm:
      return validate_region_name(name);
    case DisciplineKind::kFile:
    case DisciplineKind::kPmem:
      return validate_path(name);
    case DisciplineKind::kAnonymous:
      return absl::InvalidArgumentError(
          "the anonymous discipline has no named object (use AnonymousSource)");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown discipline kind ", static_cast<uint32_t>(kind)));
}

}  // namespace internal

absl::StatusOr<size_t> discipline_limit(DisciplineKind kind, std::string_view name) {
  if (absl::Status s = internal::validate_name(kind, name); !s.ok()) return s;
  std::string directory = kind == DisciplineKind::kShm ? kShmDirectory : parent_directory(name);
  struct statvfs fs;
  if (statvfs(directory.c_str(), &fs) != 0) {
    return internal::errno_status(errno, absl::StrCat("directory \"", directory, "\""),
                                  "cannot read the file system's size");
  }
  size_t total = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(fs.f_blocks), static_cast<size_t>(fs.f_frsize),
                             &total)) {
    total = kMaxSharedObject;
  }
  return std::min(total, kMaxSharedObject);
}

absl::Status remove_shared(DisciplineKind kind, std::string_view name) {
  if (absl::Status s = internal::validate_name(kind, name); !s.ok()) return s;
  int rc;
  if (kind == DisciplineKind::kShm) {
    rc = shm_unlink(internal::shm_object_name(name).c_str());
  } else {
    rc = unlink(std::string(name).c_str());
  }
  if (rc != 0) return internal::errno_status(errno, internal::describe_object(kind, name), "cannot remove");
  return absl::OkStatus();
}

}  // namespace memd::disciplines
