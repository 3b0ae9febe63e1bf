#include "heap/site_table.h"

#include <cstring>

namespace memd::heap {
namespace {

uint64_t hash_of(const char* text, size_t n, uint32_t line, bool is_pc) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the text, then the line
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(text[i])) * 0x100000001b3ull;
  h = (h ^ line) * 0x100000001b3ull;
  h = (h ^ (is_pc ? 1u : 2u)) * 0x100000001b3ull;
  return h | 1;  // never 0, which marks a free slot
}

}  // namespace

uint32_t site_index(SiteTable& t, const char* text, uint32_t line, bool is_pc) {
  size_t n = strnlen(text, sizeof(SharedSite::text) - 1);
  uint64_t key = hash_of(text, n, line, is_pc);
  uint32_t i = static_cast<uint32_t>(key >> 17) & (SiteTable::kSlots - 1);
  for (uint32_t probes = 0; probes < SiteTable::kSlots; ++probes, i = (i + 1) & (SiteTable::kSlots - 1)) {
    SharedSite& s = t.slot[i];
    uint64_t k = s.key.load(std::memory_order_acquire);
    if (k == key) return i;  // a 64-bit hash stands for the text
    if (k != 0) continue;
    // Half full is full: probes stay short.
    if (t.sites.load(std::memory_order_relaxed) >= SiteTable::kSlots / 2) return SiteTable::kOther;
    uint64_t expected = 0;
    if (!s.key.compare_exchange_strong(expected, key, std::memory_order_acq_rel)) {
      if (expected == key) return i;  // another process claimed it for this site
      continue;
    }
    t.sites.fetch_add(1, std::memory_order_relaxed);
    std::memcpy(s.text, text, n);
    s.text[n] = '\0';
    s.line = line;
    s.is_pc = is_pc ? 1 : 0;
    s.ready.store(1, std::memory_order_release);
    return i;
  }
  return SiteTable::kOther;
}

void site_allocated(SiteTable& t, uint32_t index, uint64_t bytes) {
  if (index > SiteTable::kOther) index = SiteTable::kOther;
  SharedSiteCounts& c = t.slot[index].counts;
  c.n_alloc.fetch_add(1, std::memory_order_relaxed);
  c.s_alloc.fetch_add(bytes, std::memory_order_relaxed);
  t.total.n_alloc.fetch_add(1, std::memory_order_relaxed);
  t.total.s_alloc.fetch_add(bytes, std::memory_order_relaxed);
  uint64_t now = t.busy.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  uint64_t peak = t.max_busy.load(std::memory_order_relaxed);
  while (now > peak && !t.max_busy.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void site_freed(SiteTable& t, uint32_t index, uint64_t bytes) {
  if (index > SiteTable::kOther) index = SiteTable::kOther;
  SharedSiteCounts& c = t.slot[index].counts;
  c.n_free.fetch_add(1, std::memory_order_relaxed);
  c.s_free.fetch_add(bytes, std::memory_order_relaxed);
  t.total.n_free.fetch_add(1, std::memory_order_relaxed);
  t.total.s_free.fetch_add(bytes, std::memory_order_relaxed);
  t.busy.fetch_sub(bytes, std::memory_order_relaxed);
}

bool site_name(const SiteTable& t, uint32_t index, const char** text, uint32_t* line, bool* is_pc) {
  if (index >= SiteTable::kSlots) return false;
  const SharedSite& s = t.slot[index];
  if (s.key.load(std::memory_order_acquire) == 0 || s.ready.load(std::memory_order_acquire) == 0) return false;
  *text = s.text;
  *line = s.line;
  *is_pc = s.is_pc != 0;
  return true;
}

}  // namespace memd::heap
