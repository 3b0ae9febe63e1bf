// The books of a shared region's debug and profile methods: call sites and
// what each allocated and freed, kept inside the region so that every
// process of it counts into one table and any of them (or memdctl) can
// print the summary. A site is named by text, not by address: another
// process has its code elsewhere, so a return address is recorded as
// "object+0xoffset" (region/site_text.h), a recorded site as its file and
// line.
//
// Lock-free: a site's slot is claimed with one compare-and-swap of its key;
// counts are atomic adds. A process killed between the claim and the text
// leaves a slot that prints as "(unnamed)". Past half the table's slots
// every new site counts under one "other sites" entry.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace memd::heap {

struct SharedSiteCounts {
  std::atomic<uint64_t> n_alloc{0}, n_free{0}, s_alloc{0}, s_free{0};
};

struct SharedSite {
  std::atomic<uint64_t> key{0};    // 0: free; else the text's hash (never 0)
  std::atomic<uint32_t> ready{0};  // 1 once text and line are written
  uint32_t line = 0;               // 0 for a return address
  uint32_t is_pc = 0;              // text is object+0xoffset, not a file
  uint32_t reserved = 0;
  char text[96] = {};
  SharedSiteCounts counts;
};

struct SiteTable {
  static constexpr uint32_t kSlots = 1024;      // a power of two
  static constexpr uint32_t kOther = kSlots;    // the index of "other sites"
  std::atomic<uint32_t> sites{0};               // slots claimed
  uint32_t reserved = 0;
  SharedSiteCounts total;
  std::atomic<uint64_t> busy{0}, max_busy{0};   // bytes in use now and at most
  SharedSite slot[kSlots + 1];
};

// The index of the site named by `text` (truncated to 95 bytes) and `line`
// (0 with is_pc), claimed on first use; kOther when the table is half full.
uint32_t site_index(SiteTable& t, const char* text, uint32_t line, bool is_pc);
void site_allocated(SiteTable& t, uint32_t index, uint64_t bytes);
void site_freed(SiteTable& t, uint32_t index, uint64_t bytes);
// The site's text and line if its slot is named; false for kOther, a free
// slot or an index out of range (a header another process overwrote).
bool site_name(const SiteTable& t, uint32_t index, const char** text, uint32_t* line, bool* is_pc);

}  // namespace memd::heap
