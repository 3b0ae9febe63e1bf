#include "region/profile_sites.h"

#include <cstring>

#include "region/site_text.h"
#include "region/report_line.h"

namespace memd::region {
namespace {

using region::Line;

uint64_t hash_of(const heap::DebugSite& s) {
  uint64_t h = s.file != nullptr ? reinterpret_cast<uintptr_t>(s.file) * 31 + s.line
                                 : reinterpret_cast<uintptr_t>(s.pc);
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 32);
}

bool same(const heap::DebugSite& a, const heap::DebugSite& b) {
  if ((a.file == nullptr) != (b.file == nullptr)) return false;
  if (a.file == nullptr) return a.pc == b.pc;
  return a.line == b.line && (a.file == b.file || std::strcmp(a.file, b.file) == 0);
}

void add_counts(Line& l, const SiteCounts& c) {
  l.add("n_alloc=");
  l.add_decimal(c.n_alloc);
  l.add(":n_free=");
  l.add_decimal(c.n_free);
  l.add(":s_alloc=");
  l.add_decimal(c.s_alloc);
  l.add(":s_free=");
  l.add_decimal(c.s_free);
  l.add(":");
}

// "    <key>:region=<region>:n_alloc=...:" for one site's counts; `key`
// writes what names the site.
template <class Key>
void write_site_line(int fd, Key key, const char* region, const SiteCounts& c) {
  Line l;
  l.add("    ");
  key(l);
  l.add(":region=");
  l.add(region);
  l.add(":");
  add_counts(l, c);
  l.add("\n");
  l.write_to(fd);
}

}  // namespace

uint32_t ProfileSites::index_of(const heap::DebugSite& site) {
  uint32_t i = static_cast<uint32_t>(hash_of(site)) & (kSlots - 1);
  for (uint32_t probes = 0; probes < kSlots; ++probes, i = (i + 1) & (kSlots - 1)) {
    Entry& e = table_[i];
    if (!e.used) {
      // Half full is full: probes stay short.
      if (entries_ >= kSlots / 2) return kOther;
      e.used = true;
      e.site = site;
      ++entries_;
      return i;
    }
    if (e.pc_text == nullptr && same(e.site, site)) return i;
  }
  return kOther;
}

uint32_t ProfileSites::index_of_pc_text(const char* pc_text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char* c = pc_text; *c != '\0'; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 0x100000001b3ull;
  uint32_t i = static_cast<uint32_t>(h ^ (h >> 32)) & (kSlots - 1);
  for (uint32_t probes = 0; probes < kSlots; ++probes, i = (i + 1) & (kSlots - 1)) {
    Entry& e = table_[i];
    if (!e.used) {
      if (entries_ >= kSlots / 2) return kOther;
      e.used = true;
      e.site = heap::DebugSite{};
      e.pc_text = pc_text;
      ++entries_;
      return i;
    }
    if (e.site.file == nullptr && e.pc_text != nullptr && std::strcmp(e.pc_text, pc_text) == 0) return i;
  }
  return kOther;
}

void ProfileSites::add_site_counts(uint32_t index, const SiteCounts& counts) {
  table_[index].counts.add(counts);
  total_.add(counts);
}

void ProfileSites::allocated(uint32_t index, uint64_t bytes) {
  table_[index].counts.allocated(bytes);
  total_.allocated(bytes);
  busy_ += bytes;
  if (busy_ > max_busy_) max_busy_ = busy_;
}

void ProfileSites::freed(uint32_t index, uint64_t bytes) {
  table_[index].counts.freed(bytes);
  total_.freed(bytes);
  busy_ -= bytes;
}

void ProfileSites::write_summary(int fd, const char* region, uint64_t extent) const {
  Line l;
  l.add("ALLOCATION USAGE SUMMARY:");
  add_counts(l, total_);
  l.add("\n");
  l.write_to(fd);
  l = Line{};
  l.add("region=");
  l.add(region);
  l.add(":");
  add_counts(l, total_);
  l.add("max_busy=");
  l.add_decimal(max_busy_);
  l.add(":extent=");
  l.add_decimal(extent);
  l.add(":\n");
  l.write_to(fd);
  // Files in the order their first site sits in the table, each once, its
  // lines after it; then the sites without a file (file=<>), then the rest.
  for (uint32_t i = 0; i < kSlots; ++i) {
    const Entry& first = table_[i];
    if (!first.used || first.site.file == nullptr) continue;
    bool seen = false;
    for (uint32_t j = 0; j < i && !seen; ++j) {
      seen = table_[j].used && table_[j].site.file != nullptr && std::strcmp(table_[j].site.file, first.site.file) == 0;
    }
    if (seen) continue;
    SiteCounts file;
    for (uint32_t j = i; j < kSlots; ++j) {
      const Entry& e = table_[j];
      if (!e.used || e.site.file == nullptr || std::strcmp(e.site.file, first.site.file) != 0) continue;
      file.add(e.counts);
    }
    l = Line{};
    l.add("file=");
    l.add(first.site.file);
    l.add(":");
    add_counts(l, file);
    l.add("\n");
    l.write_to(fd);
    // Its lines in increasing order.
    int64_t last = -1;
    for (;;) {
      int64_t next = INT64_MAX;
      for (uint32_t j = i; j < kSlots; ++j) {
        const Entry& e = table_[j];
        if (e.used && e.site.file != nullptr && e.site.line > last && e.site.line < next &&
            std::strcmp(e.site.file, first.site.file) == 0) {
          next = e.site.line;
        }
      }
      if (next == INT64_MAX) break;
      for (uint32_t j = i; j < kSlots; ++j) {
        const Entry& e = table_[j];
        if (!e.used || e.site.file == nullptr || e.site.line != next || std::strcmp(e.site.file, first.site.file) != 0) {
          continue;
        }
        write_site_line(fd, [&](Line& k) { k.add("line="), k.add_decimal(static_cast<uint64_t>(next)); }, region,
                        e.counts);
      }
      last = next;
    }
  }
  SiteCounts unnamed;
  bool any = false;
  for (uint32_t i = 0; i < kSlots; ++i) {
    const Entry& e = table_[i];
    if (!e.used || e.site.file != nullptr) continue;
    any = true;
    unnamed.add(e.counts);
  }
  if (any) {
    l = Line{};
    l.add("file=<>:");
    add_counts(l, unnamed);
    l.add("\n");
    l.write_to(fd);
    for (uint32_t i = 0; i < kSlots; ++i) {
      const Entry& e = table_[i];
      if (!e.used || e.site.file != nullptr) continue;
      write_site_line(
          fd,
          [&](Line& k) {
            k.add("pc=");
            if (e.pc_text != nullptr) k.add(e.pc_text);
            else add_code_address(k, e.site.pc);
          },
          region, e.counts);
    }
  }
  const SiteCounts& other = table_[kOther].counts;
  if (other.n_alloc != 0 || other.n_free != 0) {
    l = Line{};
    l.add("other sites (past ");
    l.add_decimal(kSlots / 2);
    l.add("):region=");
    l.add(region);
    l.add(":");
    add_counts(l, other);
    l.add("\n");
    l.write_to(fd);
  }
}

}  // namespace memd::region
