// The wire format of the lease socket (lease_socket.h): one fixed-size
// request and one fixed-size response per call. Both ends are this library
// (same build, same host), so the structs travel as they lie in memory. The
// owner trusts nothing in a request: any bytes at all may arrive, and
// tests/fuzz/lease_socket_fuzzer.cc sends them.
#pragma once

#include <sys/un.h>

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "region/lease_service.h"

namespace memd::region::lease_wire {

enum class Op : uint32_t { kHello = 1, kLease, kGiveBack, kAcquireHuge, kReleaseHuge, kResizeHuge };
inline constexpr uint32_t kMagic = 0x6d6c7331;  // "mls1"
inline constexpr uint32_t kMaxMessage = 512;

struct Request {
  uint32_t magic = kMagic;
  Op op{};
  uint32_t kind = 0, cls = 0, owner = 0, count = 0, pages = 0, align = 0;
  int32_t pid = 0;  // hello: must be the connection's (SO_PEERCRED)
  uint64_t start_time = 0;
  uint32_t blocks[kMaxLeaseBatch] = {};
};

struct Response {
  int32_t code = 0;  // absl::StatusCode
  uint32_t count = 0;
  uint32_t a = 0, b = 0, c = 0;  // op-specific
  uint32_t blocks[kMaxLeaseBatch] = {};
  uint8_t zeroed[kMaxLeaseBatch] = {};
  uint8_t adopted[kMaxLeaseBatch] = {};
  char message[160] = {};
};

static_assert(sizeof(Request) <= kMaxMessage && sizeof(Response) <= kMaxMessage);

// The socket address of `path`; INVALID_ARGUMENT if it does not fit.
absl::Status make_address(std::string_view path, sockaddr_un* addr);
// A status into a response (its message cut to fit), and back.
void set_status(Response* r, const absl::Status& s);
absl::Status status_of(const Response& r);

}  // namespace memd::region::lease_wire
