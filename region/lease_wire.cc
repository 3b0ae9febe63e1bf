#include "region/lease_wire.h"

#include <sys/socket.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace memd::region::lease_wire {

absl::Status make_address(std::string_view path, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr->sun_path) {
    return absl::InvalidArgumentError(absl::StrCat("socket path of ", path.size(), " bytes (1..",
                                                   sizeof addr->sun_path - 1, ")"));
  }
  std::memcpy(addr->sun_path, path.data(), path.size());
  return absl::OkStatus();
}

void set_status(Response* r, const absl::Status& s) {
  r->code = static_cast<int32_t>(s.code());
  std::string m(s.message());
  std::strncpy(r->message, m.c_str(), sizeof r->message - 1);
}

absl::Status status_of(const Response& r) {
  if (r.code == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(r.code),
                      std::string(r.message, strnlen(r.message, sizeof r.message)));
}

}  // namespace memd::region::lease_wire
