#include "client/status_errno.h"

#include <cerrno>
#include <string_view>

namespace memd::client {

int errno_of(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kNotFound: return ENOENT;
    case absl::StatusCode::kAlreadyExists: return EEXIST;
    case absl::StatusCode::kPermissionDenied: return EACCES;
    case absl::StatusCode::kFailedPrecondition:
      return s.message().find("owner") != std::string_view::npos ? EBUSY : EPROTO;
    case absl::StatusCode::kDataLoss: return EBADMSG;
    case absl::StatusCode::kUnavailable: return ECONNREFUSED;
    case absl::StatusCode::kResourceExhausted: return ENOMEM;
    case absl::StatusCode::kOutOfRange: return EFAULT;
    case absl::StatusCode::kDeadlineExceeded: return ETIMEDOUT;
    default: return EINVAL;
  }
}

}  // namespace memd::client
