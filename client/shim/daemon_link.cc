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
#include "region/call_site.h"
#include "region/options.h"
#include "region/region.h"

namespace {

memd::Client* client = nullptr;
memd::Region* region = nullptr;

// The site the shim gave for this thread's next call (debug and profile
// regions only), applied to that call and dropped.
thread_local memd::heap::DebugSite tl_site;
thread_local bool tl_has_site = false;

template <class Call>
auto at_site(Call call) {
  if (!tl_has_site) return call();
  tl_has_site = false;
  memd::region::CallSiteScope at(tl_site);
  return call();
}

void* link_alloc(size_t size) {
  return at_site([&] { return region->alloc(size); });
}
void* link_alloc_aligned(size_t size, size_t align) {
  return at_site([&] { return region->alloc_aligned(size, align); });
}
void* link_alloc_zeroed(size_t size) {
  return at_site([&] { return region->alloc_zeroed(size); });
}
void* link_resize(void* p, size_t size) {
  return at_site([&] { return region->resize(p, size); });
}
int link_free(void* p) {
  if (!region->contains(p)) return 0;
  at_site([&] { region->free(p); return 0; });
  return 1;
}
// A debug or profile region judges every pointer the shim's own heaps do
// not hold: a free of anything else is its "unallocated block" report.
int link_free_any(void* p) {
  at_site([&] { region->free(p); return 0; });
  return 1;
}
int link_contains_any(const void*) { return 1; }
void link_set_site(const char* file, unsigned line, const void* pc) {
  tl_site = memd::heap::DebugSite{file, line, pc};
  tl_has_site = true;
}
int link_check_objects() { return region->check_objects(); }
void link_write_profile(int fd) { (void)region->write_profile(fd); }
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
  if (t->chain_pools != nullptr) {
    e.chain_pools = [t](memd::client::telemetry::ChainPoolView* out) {
      size_t n = 0;
      out->chains.resize(memd::client::telemetry::kMaxReportedChains);
      out->on = t->chain_pools(&out->totals, out->chains.data(), out->chains.size(), &n) != 0;
      out->chains.resize(out->on ? n : 0);
    };
  }
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
  if (hooks->method != 0) {
    std::optional<memd::Method> m = memd::method_from_number(static_cast<uint64_t>(hooks->method));
    if (!m) return fail(absl::InvalidArgumentError("no such method"));
    o.method = *m;
  }
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
  heap->set_site = nullptr;
  heap->check_objects = nullptr;
  heap->write_profile = nullptr;
  if (region->method() == memd::Method::kDebug || region->method() == memd::Method::kProfile) {
    region->set_debug_options({hooks->debug_check != 0, hooks->debug_abort != 0});
    for (int i = 0; i < hooks->watches; ++i) (void)region->watch(reinterpret_cast<const void*>(hooks->watch[i]));
    heap->free = link_free_any;
    heap->contains = link_contains_any;
    heap->set_site = link_set_site;
    heap->check_objects = link_check_objects;
    heap->write_profile = link_write_profile;
  }
  hooks->leave_private();
  return 0;
}
