// libmemd-daemon-link.so: the malloc shim's way into a daemon region. It
// opens the region through memd::Client and serves the shim's calls from it.
// Every call to the daemon runs between the shim's enter_private and
// leave_private hooks (client::set_rpc_guard).
#include "client/shim/daemon_link.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "client/daemon_client.h"
#include "client/daemon_connection.h"
#include "region/options.h"
#include "region/region.h"

namespace {

memd::Client* client = nullptr;
memd::Region* region = nullptr;

void* link_alloc(size_t size) { return region->alloc(size); }
void* link_alloc_aligned(size_t size, size_t align) { return region->alloc_aligned(size, align); }
void* link_alloc_zeroed(size_t size) { return region->alloc_zeroed(size); }
void* link_resize(void* p, size_t size) { return region->resize(p, size); }
int link_free(void* p) {
  if (!region->contains(p)) return 0;
  region->free(p);
  return 1;
}
size_t link_usable_size(const void* p) { return region->size(p); }
int link_contains(const void* p) { return region->contains(p) ? 1 : 0; }
void link_trim() { region->compact(); }
int link_fork_child() { return region->remap_private_in_child() ? 0 : -1; }

// At exit: the counts since the last report go out before the process does
// (a program that runs for less than a report interval shows up at all).
void report_at_exit() { client->connection()->flush_telemetry(memd::client::DaemonConnection::kLastReportWait); }

void report_shim_telemetry(memd::Client* c, const memd_shim_telemetry* t) {
  std::atexit(report_at_exit);
  if (t == nullptr) return;
  memd::client::ExternalTelemetry e;
  e.counters = [t](memd::heap::CounterSnapshot* out) { t->process_heap_counters(out); };
  e.drain = [t](memd_sample_event* out, size_t max) { return t->drain(out, max); };
  e.sampler_counts = [t](uint64_t* taken, uint64_t* dropped) { t->sampler_counts(taken, dropped); };
  c->connection()->set_external_telemetry(std::move(e));
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int memd_daemon_link_report(const memd_daemon_link_hooks* hooks,
                                                                              char* error, size_t error_size) {
  memd::region::settings_reported_elsewhere();
  memd::client::set_rpc_guard(hooks->enter_private, hooks->leave_private);
  hooks->enter_private();
  absl::StatusOr<std::unique_ptr<memd::Client>> c = memd::Client::connect();
  if (!c.ok()) {
    std::snprintf(error, error_size, "%s", std::string(c.status().message()).c_str());
    hooks->leave_private();
    return -1;
  }
  client = c->release();  // reports for as long as the process lives
  report_shim_telemetry(client, hooks->telemetry);
  hooks->leave_private();
  return 0;
}

extern "C" __attribute__((visibility("default"))) int memd_daemon_link_open(
    const char* name, const memd_daemon_link_hooks* hooks, memd_daemon_heap* heap, char* error, size_t error_size) {
  memd::region::settings_reported_elsewhere();
  memd::client::set_rpc_guard(hooks->enter_private, hooks->leave_private);
  hooks->enter_private();
  auto fail = [&](const absl::Status& s) {
    std::snprintf(error, error_size, "%s", std::string(s.message()).c_str());
    hooks->leave_private();
    return -1;
  };
  absl::StatusOr<std::unique_ptr<memd::Client>> c = memd::Client::connect();
  if (!c.ok()) return fail(c.status());
  memd::OpenOptions o;
  o.discipline = memd::Discipline::kShm;
  o.any_discipline = true;  // an existing region as it is; a new one in shared memory
  if (const char* mb = std::getenv("MEMD_REGION_MB"); mb != nullptr && *mb != '\0') {
    o.max_bytes = size_t{std::strtoull(mb, nullptr, 10)} << 20;
  }
  absl::StatusOr<std::unique_ptr<memd::Region>> r = (*c)->open(name, o);
  if (!r.ok() && absl::IsInvalidArgument(r.status()) && o.any_discipline) {
    // Creating needs a discipline: shm.
    o.any_discipline = false;
    r = (*c)->open(name, o);
  }
  if (!r.ok()) return fail(r.status());
  // Both live as long as the process: the heap is in use until its last
  // instruction.
  client = c->release();
  region = r->release();
  report_shim_telemetry(client, hooks->telemetry);
  heap->alloc = link_alloc;
  heap->alloc_aligned = link_alloc_aligned;
  heap->alloc_zeroed = link_alloc_zeroed;
  heap->resize = link_resize;
  heap->free = link_free;
  heap->usable_size = link_usable_size;
  heap->contains = link_contains;
  heap->trim = link_trim;
  heap->fork_child = link_fork_child;
  hooks->leave_private();
  return 0;
}
