// The C API over memd::Client (memd_client.h): a memd_client* is a
// memd::Client*, and a region opened through it a memd::Region*, the same
// handle memd_region.h's calls take.
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>

#include "client/daemon_client.h"
#include "client/memd_client.h"
#include "client/status_errno.h"

namespace {

memd::Client* cast(memd_client* c) { return reinterpret_cast<memd::Client*>(c); }

// The C options as memd::OpenOptions; nullopt for a number that names no
// discipline or method.
std::optional<memd::OpenOptions> open_options_of(const memd_open_options& o) {
  // Zero, as memd_open_options_init leaves them: a later library may give
  // them a meaning, and must not read an older caller's garbage as one.
  for (uint64_t r : o.reserved) {
    if (r != 0) return std::nullopt;
  }
  memd::OpenOptions out;
  if (o.discipline != 0) {
    std::optional<memd::Discipline> d = memd::discipline_from_number(static_cast<uint64_t>(o.discipline));
    if (o.discipline < 0 || !d || *d == memd::Discipline{}) return std::nullopt;
    out.discipline = *d;
  }
  if (o.method != MEMD_METHOD_ANY) {
    std::optional<memd::Method> m = memd::method_from_number(static_cast<uint64_t>(o.method));
    if (o.method < 0 || !m) return std::nullopt;
    out.method = *m;
  }
  out.any_discipline = o.any_discipline != 0;
  out.create = o.create != 0;
  out.exclusive = o.exclusive != 0;
  out.read_only = o.read_only != 0;
  out.mode = o.mode;
  out.max_bytes = o.max_bytes;
  out.max_clients = o.max_clients;
  out.max_threads = o.max_threads;
  return out;
}

}  // namespace

extern "C" {

void memd_open_options_init(memd_open_options* options) {
  if (options == nullptr) return;
  std::memset(options, 0, sizeof(*options));
  options->discipline = MEMD_SHM;
  options->method = MEMD_METHOD_ANY;
  options->create = 1;
}

memd_client* memd_connect(const char* socket_path) {
  memd::ClientOptions options;
  if (socket_path != nullptr) options.socket = socket_path;
  absl::StatusOr<std::unique_ptr<memd::Client>> c = memd::Client::connect(options);
  if (!c.ok()) {
    errno = memd::client::errno_of(c.status());
    return nullptr;
  }
  return reinterpret_cast<memd_client*>(c->release());
}

void memd_disconnect(memd_client* client) { delete cast(client); }

memd_region* memd_open(memd_client* client, const char* name, const memd_open_options* options) {
  memd_open_options defaults;
  memd_open_options_init(&defaults);
  std::optional<memd::OpenOptions> o = open_options_of(options != nullptr ? *options : defaults);
  if (client == nullptr || name == nullptr || !o) {
    errno = EINVAL;
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<memd::Region>> r = cast(client)->open(name, *o);
  if (!r.ok()) {
    errno = memd::client::errno_of(r.status());
    return nullptr;
  }
  return reinterpret_cast<memd_region*>(r->release());
}

const char* memd_version(void) { return MEMD_VERSION_STRING; }

}  // extern "C"
