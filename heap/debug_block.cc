#include "heap/debug_block.h"

#include <cstring>

#include "heap/crash_point.h"

namespace memd::heap {
namespace {

// State words: the block's address mixed with the region's secret, so that
// neither a stale copy of a header nor bytes a program wrote by chance read
// as a live or freed block.
constexpr uint64_t kLive = 0x6c6976652d646267ull;
constexpr uint64_t kFreed = 0x667265652d646267ull;

uint64_t state_word(uint64_t kind, const DebugHeader* h, uint64_t secret, uintptr_t origin) {
  return kind ^ secret ^ (reinterpret_cast<uintptr_t>(h) - origin);
}

const unsigned char* front_guard(const void* user) {
  return static_cast<const unsigned char*>(user) - kDebugGuardBytes;
}

}  // namespace

bool debug_layout(size_t size, size_t align, DebugLayout* out) {
  size_t lead = 0;
  if (align > 16) lead = (kDebugHeadBytes + align - 1) / align * align - kDebugHeadBytes;
  size_t overhead = lead + kDebugHeadBytes + kDebugGuardBytes;
  if (size > SIZE_MAX - overhead - 15 || lead > UINT32_MAX) return false;
  // A multiple of 16, so that the user's bytes stay 16-byte aligned in
  // whatever carries the block (a class, a method's chunk).
  *out = {(size + overhead + 15) & ~size_t{15}, align > 16 ? align : 0, static_cast<uint32_t>(lead)};
  return true;
}

void* debug_format(void* raw, const DebugLayout& l, size_t size, const DebugSite& site, uint64_t secret,
                   uintptr_t origin) {
  char* user = static_cast<char*>(raw) + l.lead + kDebugHeadBytes;
  DebugHeader* h = debug_header(user);
  // The state word last, after the guards: a process killed part way
  // through leaves a slot that does not read as a live block, rather than
  // a live one whose back guard reads as overwritten.
  *h = DebugHeader{0, size, site, l.lead, 0, nullptr, nullptr};
  std::memset(user - kDebugGuardBytes, kDebugGuardByte, kDebugGuardBytes);
  crash_point("debug.format");  // header and front guard written, not the back guard
  std::memset(user + size, kDebugGuardByte, kDebugGuardBytes);
  __atomic_store_n(&h->state, state_word(kLive, h, secret, origin), __ATOMIC_RELEASE);
  return user;
}

DebugState debug_state(const void* user, uint64_t secret, uintptr_t origin) {
  const DebugHeader* h = debug_header(user);
  if (h->state == state_word(kLive, h, secret, origin)) return DebugState::kLive;
  if (h->state == state_word(kFreed, h, secret, origin)) return DebugState::kFreed;
  return DebugState::kNotABlock;
}

bool debug_find_overwrite(const void* user, int64_t* offset) {
  const unsigned char* front = front_guard(user);
  // The byte nearest the user's bytes first: an underrun writes downwards.
  for (size_t i = kDebugGuardBytes; i-- > 0;) {
    if (front[i] != kDebugGuardByte) {
      *offset = static_cast<int64_t>(i) - static_cast<int64_t>(kDebugGuardBytes);
      return true;
    }
  }
  uint64_t size = debug_header(user)->size;
  const unsigned char* back = static_cast<const unsigned char*>(user) + size;
  for (size_t i = 0; i < kDebugGuardBytes; ++i) {
    if (back[i] != kDebugGuardByte) {
      *offset = static_cast<int64_t>(size + i);
      return true;
    }
  }
  return false;
}

void debug_mark_freed(void* user, uint64_t secret, uintptr_t origin) {
  DebugHeader* h = debug_header(user);
  h->state = state_word(kFreed, h, secret, origin);
  std::memset(user, kDebugFreedByte, h->size);
}

bool debug_find_write_after_free(const void* user, int64_t* offset) {
  const unsigned char* p = static_cast<const unsigned char*>(user);
  uint64_t size = debug_header(user)->size;
  for (uint64_t i = 0; i < size; ++i) {
    if (p[i] != kDebugFreedByte) {
      *offset = static_cast<int64_t>(i);
      return true;
    }
  }
  return false;
}

}  // namespace memd::heap
