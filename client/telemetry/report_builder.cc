#include "client/telemetry/report_builder.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>

#include "absl/debugging/symbolize.h"

namespace memd::client::telemetry {
namespace {

// The report's numbers are the classifier's.
static_assert(static_cast<int>(region::ChainOutcome::kPooled) == v1::CHAIN_POOLED);
static_assert(static_cast<int>(region::ChainOutcome::kWrapper) == v1::CHAIN_WRAPPER);
static_assert(static_cast<int>(region::ChainOutcome::kMixedSizes) == v1::CHAIN_MIXED_SIZES);
static_assert(static_cast<int>(region::ChainOutcome::kPastPools) == v1::CHAIN_PAST_POOLS);

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// The entry points every allocator exports: frames of these are the
// allocator's, not the program's.
bool is_allocation_entry(const std::string& name) {
  static const char* const kEntries[] = {"malloc", "calloc", "realloc", "reallocarray", "free", "cfree",
                                          "posix_memalign", "aligned_alloc", "memalign", "valloc",
                                          "pvalloc", "malloc_usable_size"};
  for (const char* e : kEntries) {
    if (name == e) return true;
  }
  return starts_with(name, "operator new") || starts_with(name, "operator delete") || starts_with(name, "memd::") ||
         starts_with(name, "memd_");
}

}  // namespace

const std::string& ReportBuilder::symbol(uint64_t address) {
  auto it = names_.find(address);
  if (it != names_.end()) return it->second;
  char buf[1024];
  // A return address points after the call: look up the call itself.
  std::string name;
  void* pc = reinterpret_cast<void*>(address - 1);
  Dl_info info{};
  if (address > 0 && absl::Symbolize(pc, buf, sizeof buf)) {
    name = buf;
  } else if (address > 0 && dladdr(pc, &info) != 0 && info.dli_fname != nullptr) {
    // No symbol table (a stripped library): its dynamic symbol, else the
    // library and the offset, which stay the same from run to run.
    const char* base = std::strrchr(info.dli_fname, '/');
    base = base != nullptr ? base + 1 : info.dli_fname;
    if (info.dli_sname != nullptr) {
      name = info.dli_sname;
    } else {
      std::snprintf(buf, sizeof buf, "%s+0x%llx", base,
                    static_cast<unsigned long long>(address - reinterpret_cast<uintptr_t>(info.dli_fbase)));
      name = buf;
    }
  }
  return names_.emplace(address, std::move(name)).first->second;
}

bool ReportBuilder::is_allocator_frame(uint64_t address) {
  auto it = allocator_frame_.find(address);
  if (it != allocator_frame_.end()) return it->second;
  bool mine = is_allocation_entry(symbol(address));
  Dl_info info{};
  if (!mine && address > 0 && dladdr(reinterpret_cast<void*>(address - 1), &info) != 0 && info.dli_fname != nullptr) {
    // The shim and its daemon link are memd through and through.
    mine = std::strstr(info.dli_fname, "libmemd-malloc") != nullptr ||
           std::strstr(info.dli_fname, "libmemd-daemon-link") != nullptr;
  }
  allocator_frame_.emplace(address, mine);
  return mine;
}

void ReportBuilder::send_symbol(v1::TelemetryReport* r, uint64_t pc) {
  if (!sent_symbols_.insert(pc).second) return;
  v1::Symbol* sym = r->add_symbols();
  sym->set_address(pc);
  sym->set_name(symbol(pc));
}

void ReportBuilder::add_chain_pools(v1::TelemetryReport* r, const ChainPoolView& view) {
  v1::ChainPools* c = r->mutable_chain_pools();
  c->set_chains_seen(view.totals.chains);
  c->set_pooled(view.totals.pooled);
  c->set_wrappers(view.totals.lengthened);
  c->set_mixed_sizes(view.totals.mixed);
  c->set_past_pools(view.totals.unpooled);
  c->set_unwinds(view.totals.unwinds);
  c->set_untracked(view.totals.table_full);
  for (size_t i = 0; i < view.chains.size() && i < kMaxReportedChains; ++i) {
    const region::ChainRecord& rec = view.chains[i];
    v1::Chain* out = c->add_chains();
    out->set_outcome(static_cast<v1::ChainOutcome>(rec.outcome));  // the same numbers
    out->set_pool(rec.pool);
    out->set_object_bytes(rec.object_bytes);
    out->set_counted(rec.counted);
    for (uint32_t k = 0; k < rec.depth && k < region::kMaxChainDepth; ++k) {
      out->add_stack(rec.frames[k]);
      send_symbol(r, rec.frames[k]);
    }
  }
}

v1::TelemetryReport ReportBuilder::build(const std::vector<HeapView>& heaps,
                                         absl::Span<const memd_sample_event> events, const ClientTotals& totals,
                                         const ChainPoolView* chains) {
  v1::TelemetryReport r;
  for (const HeapView& h : heaps) {
    v1::HeapCounters* hc = r.add_heaps();
    hc->set_region(h.region);
    hc->set_instance(h.instance);
    for (uint32_t cls = 0; cls < heap::kMaxSegregatedClasses; ++cls) {
      const auto& c = h.counters.classes[cls];
      if (c.allocs == 0 && c.frees == 0) continue;
      uint64_t size = heap::SizeClasses::size_of_class(cls);
      v1::ClassCounters* cc = hc->add_classes();
      cc->set_size_class(static_cast<uint32_t>(size));
      cc->set_allocations(c.allocs);
      cc->set_frees(c.frees);
      cc->set_allocated_bytes(c.allocs * size);
      cc->set_freed_bytes(c.frees * size);
    }
    const heap::CounterSnapshot::Big* bigs[] = {&h.counters.large, &h.counters.huge};
    for (uint32_t k = 0; k < 2; ++k) {
      const auto& b = *bigs[k];
      if (b.allocs == 0 && b.frees == 0) continue;
      v1::ClassCounters* cc = hc->add_classes();
      cc->set_size_class(k);  // 0: large, 1: huge
      cc->set_allocations(b.allocs);
      cc->set_frees(b.frees);
      cc->set_allocated_bytes(b.alloc_bytes);
      cc->set_freed_bytes(b.freed_bytes);
    }
  }
  auto region_of = [&](uintptr_t base, uintptr_t address, uint64_t* where) -> const std::string* {
    for (const HeapView& h : heaps) {
      if (h.base == base && !h.region.empty()) {
        *where = address - base;  // regions: an offset, the same in every process
        return &h.region;
      }
    }
    *where = address;
    return nullptr;
  };
  for (const memd_sample_event& e : events) {
    uint64_t where = 0;
    const std::string* region = region_of(e.heap_base, e.address, &where);
    if (e.kind == MEMD_SAMPLE_FREE) {
      v1::SampledFree* f = r.add_frees();
      if (region) f->set_region(*region);
      f->set_address(where);
      continue;
    }
    v1::Sample* s = r.add_samples();
    s->set_id(e.id);
    if (region) s->set_region(*region);
    s->set_address(where);
    s->set_requested_bytes(e.requested_bytes);
    s->set_allocated_bytes(e.allocated_bytes);
    s->set_time_ms(e.time_ms);
    int first = 0;
    while (first < e.frame_count && is_allocator_frame(e.frames[first])) ++first;
    for (int i = first; i < e.frame_count; ++i) {
      s->add_stack(e.frames[i]);
      send_symbol(&r, e.frames[i]);
    }
  }
  if (chains != nullptr && chains->on) add_chain_pools(&r, *chains);
  r.set_rpcs(totals.rpcs);
  r.set_lease_calls(totals.lease_calls);
  r.set_sample_period_bytes(totals.sample_period);
  r.set_samples_taken(totals.samples_taken);
  r.set_samples_dropped(totals.samples_dropped);
  r.set_reports_dropped(totals.reports_dropped);
  return r;
}

}  // namespace memd::client::telemetry
