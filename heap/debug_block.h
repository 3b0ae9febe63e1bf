// The debug method's block (Vmalloc's Vmdebug): the bytes a program asked
// for, between a header that says what the block is and where it was
// allocated, and guard bytes on both sides that an overwrite changes.
//
//   raw                                 user                user + size
//   | lead: alignment | DebugHeader | front guard | the user's bytes | back guard |
//
// A block is checked at free, at resize and on demand: the header's state
// word (the block's own address mixed with a secret) says live, freed or
// "not a debug block"; the guards say whether, and at which byte, the
// program wrote outside what it asked for. A freed block is filled with a
// pattern, so a write after free shows when it leaves quarantine.
// Plain functions over memory the caller allocates: no allocation here.
#pragma once

#include <cstddef>
#include <cstdint>

namespace memd::heap {

inline constexpr size_t kDebugGuardBytes = 16;
inline constexpr uint8_t kDebugGuardByte = 0xdb;   // guards
inline constexpr uint8_t kDebugFreedByte = 0xdf;   // a freed block's bytes

// Where a call came from: a file and line (recorded by the program, see
// client/memd_debug.h), or else a return address.
struct DebugSite {
  const char* file = nullptr;  // nullptr: `pc` is the site
  uint32_t line = 0;
  const void* pc = nullptr;
};

struct DebugHeader {
  uint64_t state;        // kLive or kFreed, mixed with the block's address and a secret
  uint64_t size;         // bytes the program asked for
  DebugSite site;        // where it was allocated
  uint32_t lead;         // bytes from the raw allocation to the user's bytes
  uint32_t flags;        // kDebugReported...
  DebugHeader* prev;     // the method's list of live blocks (its owner links them)
  DebugHeader* next;
};
inline constexpr uint32_t kDebugReported = 1;  // its corruption was reported once already

// The header sits right before the front guard; the user's bytes after it.
inline constexpr size_t kDebugHeadBytes = sizeof(DebugHeader) + kDebugGuardBytes;
static_assert(kDebugHeadBytes % 16 == 0, "user bytes stay 16-byte aligned");

inline DebugHeader* debug_header(const void* user) {
  return reinterpret_cast<DebugHeader*>(const_cast<char*>(static_cast<const char*>(user)) - kDebugHeadBytes);
}

// What to allocate for `size` user bytes aligned to `align` (0 or a power of
// two): the raw size and the lead before the user's bytes. False if the
// sizes overflow.
struct DebugLayout {
  size_t raw_bytes;
  size_t raw_align;  // what the raw allocation must be aligned to (0: default)
  uint32_t lead;
};
bool debug_layout(size_t size, size_t align, DebugLayout* out);

// Lays out a block in `raw` (of layout `l`): header, guards; returns the
// user's bytes. The block is live. `origin`: what the state word measures
// the header's address from: 0 in a private heap, the region's data start
// in a shared one (other processes map it elsewhere).
void* debug_format(void* raw, const DebugLayout& l, size_t size, const DebugSite& site, uint64_t secret,
                   uintptr_t origin = 0);

enum class DebugState { kLive, kFreed, kNotABlock };
// What the header before `user` says. REQUIRES: the kDebugHeadBytes before
// user are readable (the caller knows user is inside its heap).
DebugState debug_state(const void* user, uint64_t secret, uintptr_t origin = 0);

// The first guard byte (front or back) that was overwritten, as an offset
// from `user` (negative: before it); false if the guards are intact.
// REQUIRES: debug_state(user) == kLive.
bool debug_find_overwrite(const void* user, int64_t* offset);

// Marks a live block freed and fills the user's bytes with kDebugFreedByte.
void debug_mark_freed(void* user, uint64_t secret, uintptr_t origin = 0);
// The first byte of a freed block that is no longer kDebugFreedByte (a
// write after free), as an offset from user; false if none.
bool debug_find_write_after_free(const void* user, int64_t* offset);

// The raw allocation of a block (to give back to the heap under it).
inline void* debug_raw(void* user) {
  return static_cast<char*>(user) - kDebugHeadBytes - debug_header(user)->lead;
}

}  // namespace memd::heap
