#include "heap/layout.h"

namespace memd::heap {
namespace {
constexpr uint64_t round_to_page(uint64_t n) { return (n + kPageSize - 1) & ~(kPageSize - 1); }
}  // namespace

RegionGeometry RegionGeometry::compute(uint32_t max_pages, uint32_t max_owners, uint32_t max_clients,
                                       uint32_t max_roots) {
  RegionGeometry g{};
  g.slots_offset = round_to_page(sizeof(RegionHeader));
  g.lease_offset = round_to_page(g.slots_offset + uint64_t{max_owners} * sizeof(OwnerSlot));
  g.roots_offset = round_to_page(g.lease_offset + uint64_t{max_clients} * sizeof(LeaseSlot));
  g.page_desc_offset = round_to_page(g.roots_offset + uint64_t{max_roots} * sizeof(RootEntry));
  g.block_desc_offset = round_to_page(g.page_desc_offset + uint64_t{max_pages} * sizeof(PackedPageDesc));
  g.data_offset = round_to_page(g.block_desc_offset + uint64_t{max_pages} * sizeof(BlockDesc));
  g.total_bytes = g.data_offset + uint64_t{max_pages} * kPageSize;
  return g;
}

Region Region::attach(char* base) {
  Region r;
  r.base = base;
  r.header = reinterpret_cast<RegionHeader*>(base);
  r.slots = reinterpret_cast<OwnerSlot*>(base + r.header->slots_offset);
  r.leases = reinterpret_cast<LeaseSlot*>(base + r.header->lease_offset);
  r.roots = reinterpret_cast<RootEntry*>(base + r.header->roots_offset);
  r.page_descs = reinterpret_cast<PackedPageDesc*>(base + r.header->page_desc_offset);
  r.blocks = reinterpret_cast<BlockDesc*>(base + r.header->block_desc_offset);
  r.data = base + r.header->data_offset;
  r.data_pages = r.header->max_pages;
  r.max_owners = r.header->max_owners;
  r.max_clients = r.header->max_clients;
  r.max_roots = r.header->max_roots;
  r.secret = r.header->secret;
  r.data_bytes = size_t{r.data_pages} << kPageShift;
  return r;
}

}  // namespace memd::heap
