// Fuzz target: the lease socket protocol, spoken by a client that is not
// libmemd.
//
// A region's owner serves leases on a Unix socket (region/lease_socket.h);
// any process that can reach the socket sends it whatever it likes. The
// input is one connection's requests. After the connection closes (the
// owner then takes back all it held), the region must check clean: no
// request sequence may give one block to two holders, lose a block, or
// leave the owner's books disagreeing with the page heap. An input whose
// first byte is odd also scribbles on the region's memory between requests,
// as a client mapping the region may; then the region is only required not
// to bring its owner down (a header overwritten in its fixed part is put
// back from the owner's copy before the next request, as the daemon does;
// what cannot be restored is refused from then on), and is made anew for
// the next input.
//
// A request is one op byte, then its fields as small values; a block is
// named either by its place among the blocks responses handed out so far or
// by a raw page index. Op bytes from 0xf0 send a raw request of the input's
// bytes instead.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "region/lease_service.h"
#include "region/lease_socket.h"
#include "region/lease_wire.h"
#include "region/region.h"
#include "fuzz_input.h"
#include "heap/layout.h"

namespace {

using memd::region::lease_wire::Op;
using memd::region::lease_wire::Request;
using memd::region::lease_wire::Response;
using memd::fuzz::FuzzInput;
using memd::fuzz::fail;

struct Owner {
  std::string dir, socket;
  std::unique_ptr<memd::Region> region;
  std::unique_ptr<memd::region::SocketLeaseServer> server;
};
Owner* owner = nullptr;

void make_region() {
  owner->server.reset();
  owner->region.reset();
  std::string path = owner->dir + "/region";
  (void)memd::Region::remove(path, memd::Discipline::kFile);
  memd::RegionOptions options;
  options.discipline = memd::Discipline::kFile;
  options.max_bytes = size_t{4} << 20;
  options.max_clients = 4;
  options.owner_allocates = false;
  auto r = memd::Region::create(path, options);
  if (!r.ok()) fail(std::string(r.status().message()));
  owner->region = std::move(*r);
  auto s = memd::region::SocketLeaseServer::start(owner->socket, owner->region->lease_service(),
                                                    [] { return owner->region->backing_status(); });
  if (!s.ok()) fail(std::string(s.status().message()));
  owner->server = std::move(*s);
}

int connect_to_owner() {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, owner->socket.c_str(), sizeof addr.sun_path - 1);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) fail("cannot connect");
  timeval tv{5, 0};  // the owner answers at once or not at all
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// One call; false once the owner has dropped the connection.
bool call(int fd, const Request& req, Response* resp) {
  if (send(fd, &req, sizeof req, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof req)) return false;
  size_t got = 0;
  char* p = reinterpret_cast<char*>(resp);
  while (got < sizeof *resp) {
    ssize_t r = recv(fd, p + got, sizeof *resp - got, 0);
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

uint32_t pick_block(FuzzInput& in, const std::vector<uint32_t>& seen) {
  uint16_t b = in.take<uint16_t>();
  if ((b & 0x8000) == 0 && !seen.empty()) return seen[b % seen.size()];
  return b & 0x7fff;
}

Request next_request(FuzzInput& in, const std::vector<uint32_t>& seen, uint32_t holder, uint32_t stash) {
  Request req;
  uint8_t op = in.take<uint8_t>();
  if (op >= 0xf0) {
    std::string raw = in.bytes(sizeof req);
    std::memcpy(&req, raw.data(), raw.size());
    return req;
  }
  req.op = static_cast<Op>(op % 7);  // 0 and everything unknown included
  switch (req.op) {
    case Op::kHello: {
      uint8_t how = in.take<uint8_t>();
      req.pid = how & 1 ? in.take<int32_t>() : getpid();
      req.start_time = how & 2 ? in.take<uint64_t>() : memd::region::process_start_time(getpid());
      break;
    }
    case Op::kLease: {
      req.kind = in.take<uint8_t>() % 4;
      req.cls = in.take<uint8_t>();
      uint8_t who = in.take<uint8_t>();
      req.owner = who < 0x80 ? stash : who < 0xc0 ? holder : in.take<uint32_t>();
      req.count = in.take<uint8_t>() % 40;
      break;
    }
    case Op::kGiveBack:
      req.count = in.take<uint8_t>() % 40;
      for (uint32_t i = 0; i < std::min(req.count, memd::region::kMaxLeaseBatch); ++i) req.blocks[i] = pick_block(in, seen);
      break;
    case Op::kAcquireHuge:
      req.pages = in.take<uint16_t>() % 2048;
      req.align = in.take<uint8_t>();
      break;
    case Op::kReleaseHuge:
      req.blocks[0] = pick_block(in, seen);
      break;
    case Op::kResizeHuge:
      req.blocks[0] = pick_block(in, seen);
      req.pages = in.take<uint16_t>() % 2048;
      break;
    default:
      break;
  }
  return req;
}

// A client maps the whole region writable: it may write anything into the
// header, the tables and the committed data pages. It writes through a
// mapping of its own, as a client process does (the owner's mapping is the
// owner's: in sanitizer builds its free pages are poisoned, and a write
// there would be reported as the owner's bug).
void scribble(FuzzInput& in) {
  uint32_t where = in.take<uint32_t>();
  uint32_t value = in.take<uint32_t>();
  const auto* h = reinterpret_cast<const memd::heap::RegionHeader*>(owner->region->base());
  size_t span = h->data_offset + size_t{h->page_heap.committed_pages.load()} * h->page_size;
  std::string path = owner->dir + "/region";
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) fail("cannot open " + path);
  span = std::min<size_t>(span, static_cast<size_t>(st.st_size));
  void* m = span > sizeof value ? mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  close(fd);
  if (m == MAP_FAILED) return;
  std::memcpy(static_cast<char*>(m) + where % (span - sizeof value), &value, sizeof value);
  munmap(m, span);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  owner = new Owner();
  char tmpl[] = "/tmp/memd-fuzz-lease-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) fail("mkdtemp");
  owner->dir = tmpl;
  owner->socket = owner->dir + "/lease.sock";
  make_region();
  std::atexit([] {
    owner->server.reset();
    owner->region.reset();
    std::error_code ec;
    std::filesystem::remove_all(owner->dir, ec);
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  bool scribbles = in.take<uint8_t>() & 1;
  int fd = connect_to_owner();
  std::vector<uint32_t> seen;
  uint32_t holder = 0, stash = 0;
  while (!in.empty()) {
    if (scribbles && in.take<uint8_t>() < 32) {
      scribble(in);
      continue;
    }
    Request req = next_request(in, seen, holder, stash);
    Response resp;
    if (!call(fd, req, &resp)) break;
    if (resp.code != 0) continue;
    if (req.op == Op::kHello) holder = resp.b, stash = resp.c;
    for (uint32_t i = 0; i < std::min(resp.count, memd::region::kMaxLeaseBatch); ++i) seen.push_back(resp.blocks[i]);
    if (req.op == Op::kAcquireHuge) seen.push_back(resp.blocks[0]);
  }
  close(fd);
  // The owner notices the end of the connection and takes everything back.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (owner->server->clients() != 0) {
    if (std::chrono::steady_clock::now() > deadline) fail("the owner did not notice a closed connection in 10 s");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (scribbles) {
    // As the daemon does: a header overwritten in its fixed part is
    // restored; a region whose header cannot be is marked damaged and not
    // touched again; any other may be checked, which must report what it
    // finds, not crash.
    if (owner->region->repair_backing().ok()) (void)owner->region->check();
    make_region();  // whatever the scribbles did, the next input starts whole
  } else if (absl::Status checked = owner->region->check(); !checked.ok()) {
    fail("after a client that only spoke the protocol: " + std::string(checked.message()));
  }
  return 0;
}
