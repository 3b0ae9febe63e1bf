#include "client/daemon_client.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "client/grpc_lease_channel.h"
#include "region/lease_service.h"
#include "region/options.h"
#include "region/socket_paths.h"
#include "proto/wire_enums.h"

namespace memd {

std::string Client::default_socket() { return region::client_socket_path(); }

absl::StatusOr<std::unique_ptr<Client>> Client::connect(const ClientOptions& options) {
  absl::StatusOr<std::shared_ptr<client::DaemonConnection>> c = client::DaemonConnection::connect(options);
  if (!c.ok()) return c.status();
  return std::unique_ptr<Client>(new Client(std::move(*c)));
}

Client::~Client() = default;

uint64_t Client::session() const {
  absl::StatusOr<client::DaemonConnection::Current> c = connection_->current();
  return c.ok() ? c->session : 0;
}
uint64_t Client::lease_calls() const { return connection_->lease_calls.load(); }
uint64_t Client::sessions_opened() const { return connection_->sessions_opened.load(); }

absl::StatusOr<std::unique_ptr<Region>> Client::open(std::string_view name, const OpenOptions& options) {
  if (!options.any_discipline || !options.create) return open_once(name, options);
  // The daemon creates a region only with its discipline named: open what
  // is there, else create it with options.discipline.
  OpenOptions existing = options;
  existing.create = false;
  if (!options.exclusive) {
    absl::StatusOr<std::unique_ptr<Region>> r = open_once(name, existing);
    if (r.ok() || r.status().code() != absl::StatusCode::kNotFound) return r;
  }
  OpenOptions making = options;
  making.any_discipline = false;
  absl::StatusOr<std::unique_ptr<Region>> r = open_once(name, making);
  // Made meanwhile by another process with another discipline: that is
  // the region, whatever it is.
  if (!options.exclusive && r.status().code() == absl::StatusCode::kFailedPrecondition) return open_once(name, existing);
  return r;
}

absl::StatusOr<std::unique_ptr<Region>> Client::open_once(std::string_view name, const OpenOptions& options) {
  v1::OpenRegionResponse resp;
  grpc::Status st;
  for (int attempt = 0; attempt < 4; ++attempt) {
    absl::StatusOr<client::DaemonConnection::Current> cur = connection_->current();
    if (!cur.ok()) return cur.status();
    v1::OpenRegionRequest req;
    req.set_session(cur->session);
    req.set_name(std::string(name));
    if (!options.any_discipline) req.set_discipline(to_wire(options.discipline));
    req.set_method(to_wire(options.method));
    req.set_create(options.create);
    req.set_exclusive(options.exclusive);
    req.set_max_bytes(options.max_bytes);
    req.set_max_clients(options.max_clients);
    req.set_max_threads(options.max_threads);
    req.set_mode(options.mode);
    req.set_read_only(options.read_only);
    grpc::ClientContext ctx;
    connection_->set_deadline(&ctx);
    st = cur->regions->Open(&ctx, req, &resp);
    if (st.error_code() != grpc::StatusCode::UNAVAILABLE && st.error_code() != grpc::StatusCode::UNAUTHENTICATED) break;
    connection_->await_reconnect(cur->epoch);
  }
  if (!st.ok()) return client::from_grpc(st);
  std::optional<Discipline> d = discipline_from_number(static_cast<uint32_t>(resp.discipline()));
  std::optional<Method> m = method_from_number(static_cast<uint32_t>(resp.method()));
  if (!d || *d == Discipline{} || !m || *m == Method{}) {
    return absl::InternalError(absl::StrCat("the daemon answered with discipline ", resp.discipline(), " and method ",
                                            resp.method(), ", which this client does not know"));
  }
  if (options.read_only) return Region::attach(resp.object_path(), *d, "", true, *m);
  region::ClientLease lease{resp.lease_slot(), resp.holder(), resp.stash_owner()};
  auto channel = std::make_unique<client::GrpcLeaseChannel>(connection_, std::string(name), lease, resp.handle());
  client::RegionLink* link = channel->link();
  absl::StatusOr<std::unique_ptr<Region>> region = Region::attach_leased(resp.object_path(), *d, *m, std::move(channel), lease);
  if (!region.ok()) return region.status();
  Region* r = region->get();
  connection_->set_drain(link, [r] { r->give_back_spares(); });
  connection_->set_telemetry(link, reinterpret_cast<uintptr_t>(r->data_base()),
                             [r](heap::CounterSnapshot* out) { r->add_counters(out); });
  return region;
}

}  // namespace memd
