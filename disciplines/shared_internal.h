// Helpers shared by the files of the shared disciplines; not part of the
// public interface.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "disciplines/shared_source.h"

namespace memd::disciplines::internal {

// Debian's Abseil is built with its own string_view (not std's), so a
// std::string_view must be converted before it meets StrCat or a Status.
inline absl::string_view as_absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// "/memd.<name>": the shm object behind a region name.
std::string shm_object_name(std::string_view name);
// The object as error messages name it: `shm object "/memd.x"`, `file "p"`.
std::string describe_object(DisciplineKind kind, std::string_view name);
// The status for a failed system call on `object`: the errno's code
// (ENOENT -> NOT_FOUND, EACCES -> PERMISSION_DENIED, ...), a message that
// names the object, what was being done and the system's reason.
absl::Status errno_status(int error, std::string_view object, std::string_view doing);
// INVALID_ARGUMENT unless `kind` has a backing object and `name` suits it.
absl::Status validate_name(DisciplineKind kind, std::string_view name);

// The pid that holds an flock on the file open at `fd`, from /proc/locks;
// 0 if it cannot be told. Only for error messages: the pid is the one that
// took the lock, which may have exited and left it to a forked child.
pid_t flock_holder(int fd);

// libpmem, kept to one file so nothing else includes it.
struct PmemMapping {
  char* base = nullptr;
  size_t length = 0;
  bool is_pmem = false;
};
// Maps the whole file open at `fd` read-write through pmem_map_file.
absl::StatusOr<PmemMapping> pmem_map_whole(int fd, std::string_view object);
void pmem_unmap_whole(char* base, size_t length);
// Data plane: flushes [addr, addr + len). False with errno on failure.
bool pmem_make_durable(const char* addr, size_t len, bool is_pmem);

}  // namespace memd::disciplines::internal
