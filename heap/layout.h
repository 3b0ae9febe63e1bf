// The data layout of a region: plain, versioned, fixed-width structs addressed
// by offsets, so that a region may be mapped at different addresses by
// different processes (and, for files, survive them).
//
//   [ RegionHeader | OwnerSlot x max_owners | LeaseSlot x max_clients |
//     RootEntry x max_roots | PageDesc x max_pages | BlockDesc x max_pages |
//     data pages ... ]
//
// docs/region-format.md describes every field; change it with the format.
//
// Page-level metadata (PageDesc, free runs, the page heap state in the header)
// has one writer, the page-heap owner. A block's allocation state has one
// writer, the block's owner (a thread heap). Fields written by anyone else are
// atomics and say so.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "heap/params.h"
#include "heap/units.h"

namespace memd::heap {

inline constexpr uint64_t kRegionMagic = 0x6d656d642d726567ull;  // "memd-reg"
// 3: BlockDesc's remote list is one 64-bit word holding head, tail and count
// (RemoteList below); version 2 kept only a 32-bit head at byte 48.
// 4: an in-use block's bytes 32..39 (a free run's LRU links) are its taken
// word, so that remote frees its owner took are not lost to a crash. An
// owner opening a version-2 or -3 region upgrades it in place
// (region_upgrade.h).
inline constexpr uint32_t kFormatVersion = 4;
inline constexpr uint32_t kOldestUpgradableVersion = 2;

enum class PageKind : uint8_t {
  kUncommitted = 0,  // never handed out (reads as zero)
  kFree = 1,         // part of a free run of the page heap
  kSegregated = 2,   // a small or medium block: headerless objects of one class
  kLarge = 3,        // a large block: objects with headers, best fit
  kHuge = 4,         // one object spanning a run of pages
  kPurging = 5,      // a free run being discarded outside the page-heap lock
};

// One per data page: which block the page belongs to and of what class.
// Stored packed in one 64-bit word so that any process can read it in one
// load, even while the page-heap owner rewrites it.
struct PageDesc {
  uint32_t block = 0;  // page index of the block's (or free run's) first page
  uint16_t cls = 0;    // size class of a segregated block
  PageKind kind = PageKind::kUncommitted;
  uint8_t reserved = 0;

  static PageDesc unpack(uint64_t w) {
    return {static_cast<uint32_t>(w), static_cast<uint16_t>(w >> 32),
            static_cast<PageKind>(w >> 48), 0};
  }
  uint64_t pack() const {
    return uint64_t{block} | uint64_t{cls} << 32 | uint64_t{static_cast<uint8_t>(kind)} << 48;
  }
};
using PackedPageDesc = std::atomic<uint64_t>;
static_assert(sizeof(PackedPageDesc) == 8);

// The state of a free run's pages.
enum RunState : uint8_t {
  kRunFresh = 0,      // never used since committed: zero, not resident
  kRunDirty = 1,      // freed, may be resident: reuse costs no page faults
  kRunDiscarded = 2,  // given back to the system: zero; reuse refaults
};

// Block flags (owner-written).
inline constexpr uint8_t kBlockFull = 1;       // on the owner's full list
inline constexpr uint8_t kBlockFreshBump = 2;  // memory past `bump` reads as zero
inline constexpr uint8_t kBlockCached = 4;     // empty, kept in the owner's cache
// A huge run holding an allocation sample (heap/sampling.h); written by the
// thread that allocates the run and by the one that frees it.
inline constexpr uint8_t kBlockSampled = 8;
// Empty, on no list: kept in the owner's lookaside for the next class whose
// blocks have its length (ThreadHeap::park_block). Private memory only.
inline constexpr uint8_t kBlockParked = 16;

// A block's list of remotely freed objects, packed into one 64-bit word so
// that a push changes head, tail and count in one CAS and the owner takes all
// three with one exchange: it learns how many objects it got, and where the
// list ends, without reading a single one of them (each a cache line the
// freeing thread wrote last).
//
//   bits  0..20  head:  in-block granule index + 1 of the object pushed last (0: empty)
//   bits 21..41  tail:  granule index + 1 of the object pushed first, whose link is 0
//   bits 42..63  count: objects on the list
//
// Objects link to each other as on the local free list: in-block offset + 1
// of the next one in their first 4 bytes (a large chunk: in its payload's).
// A granule is 8 bytes; every segregated object and every large chunk header
// starts on one. 21 bits of granules cover blocks of kMaxBlockPages pages
// (params.h), and 22 bits of count every object such a block can hold; a
// count that wraps (only a corrupt list could) lands out of the word.
//
// Why 64 bits rather than a 32-bit word of head and count (16 bits each,
// which fits blocks of up to 128 pages): the tail. Without it the owner must
// still walk the list whenever its local free list is not empty, to append
// one list to the other, and in the cross-thread-free workloads that is most
// collections (about two thirds of the objects collected in wl_cross_free).
// The wider word costs nothing in the BlockDesc: it takes the place of the
// 32-bit head and the padding beside it.
struct RemoteList {
  uint32_t head = 0;   // in-block offset + 1 of the first object, 0: empty
  uint32_t tail = 0;   // in-block offset + 1 of the last object
  uint32_t count = 0;  // objects on the list

  static constexpr unsigned kLinkBits = 21;
  static constexpr uint64_t kLinkMask = (uint64_t{1} << kLinkBits) - 1;
  static constexpr unsigned kCountShift = 2 * kLinkBits;
  static constexpr uint64_t kCountOne = uint64_t{1} << kCountShift;
  static constexpr uint32_t kMaxCount = (uint32_t{1} << (64 - kCountShift)) - 1;
  // The largest in-block offset a link field can hold.
  static constexpr uint64_t kMaxOffset = (kLinkMask - 1) * 8;

  // A link (in-block offset + 1, 0: none) as a field of the word, and back.
  // REQUIRES: the offset is a multiple of 8 and at most kMaxOffset.
  static constexpr uint64_t field(uint32_t link) { return link == 0 ? 0 : uint64_t{(link - 1) >> 3} + 1; }
  static constexpr uint32_t link(uint64_t field) {
    return field == 0 ? 0 : static_cast<uint32_t>(((field - 1) << 3) + 1);
  }

  static constexpr RemoteList unpack(uint64_t w) {
    return {link(w & kLinkMask), link(w >> kLinkBits & kLinkMask), static_cast<uint32_t>(w >> kCountShift)};
  }
  constexpr uint64_t pack() const {
    return field(head) | field(tail) << kLinkBits | uint64_t{count} << kCountShift;
  }
  // The head alone (whether the list is empty, and where a walk starts).
  static constexpr uint32_t head_of(uint64_t w) { return link(w & kLinkMask); }
};
static_assert(uint64_t{kMaxBlockPages} * kPageSize - 8 <= RemoteList::kMaxOffset,
              "a remote list's links cover every object of the largest block");
static_assert(uint64_t{kMaxBlockPages} * kPageSize / 16 <= RemoteList::kMaxCount,
              "a remote list's count covers every object of the largest block");
static_assert(RemoteList::unpack(RemoteList{4097, 17, 5}.pack()).head == 4097);
static_assert(RemoteList::unpack(RemoteList{4097, 17, 5}.pack()).tail == 17);
static_assert(RemoteList::unpack(RemoteList{4097, 17, 5}.pack()).count == 5);

// One per data page; only the entry of a block's (or free run's) first page is
// used. One cache line each, so owners of neighbouring blocks never share one.
struct alignas(64) BlockDesc {
  // --- written by the block's owner ---
  uint32_t free_head;  // in-block offset + 1 of the first locally freed object, 0: none
  uint32_t bump;       // in-block offset of the next never-used object
  uint32_t end;        // in-block offset past the last object
  uint32_t used;       // objects handed out and not yet freed back to the owner
  uint16_t cls;        // size class (segregated blocks)
  PageKind kind;
  uint8_t flags;       // kBlock* above
  PageIndex prev;      // links in the owner's available/full lists, or a free bin
  PageIndex next;
  // --- written by the page-heap owner ---
  PageCount pages;     // length of the block or free run
  union {
    // Free runs: links in the dirty (not yet discarded) list.
    struct {
      PageIndex prev;
      PageIndex next;
    } lru;
    // In-use blocks, written by the block's owner: remote frees it took off
    // `remote` and has not yet put on its free list (or freed, in a large
    // block), as a packed RemoteList whose tail field names the entry after
    // the head; 0: none. A process killed between the two steps leaves them
    // named here, and recovery finishes the move (remote_free.h, "Taking").
    uint64_t taken;
  };
  uint32_t freed_ms;   // free runs: when it became free (monotonic ms, wraps)
  uint8_t run_state;   // free runs: a RunState
  // In-use blocks: nonzero once a publish made this block's page descriptors
  // and the committed mark durable (descriptors_durable). Cleared whenever
  // they change; only a hint that spares a persist, never read by recovery.
  uint8_t durable_descs;
  // In-use segregated blocks: the owner's call-chain pool (1..) the block
  // serves, 0: its plain class list. Meaningful to the owner alone, which
  // sets it whenever it takes the block (fresh or adopted); never read by
  // recovery or by another process.
  uint8_t chain_group;
  uint8_t pad;
  // --- written by any thread of any process ---
  std::atomic<uint32_t> pending_next; // link in the owner's pending stack
  std::atomic<uint32_t> owner_word;   // owner << 1 | notified (see remote_free.h)
  std::atomic<uint64_t> remote;       // remotely freed objects: a packed RemoteList
};
static_assert(sizeof(BlockDesc) == 64);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// Whether a publish already made block B's page descriptors and the committed
// mark above it durable, since they last changed (region_publish.cc). Read
// and written by any thread of the processes holding B, hence atomic.
inline bool descriptors_durable(const BlockDesc& b) { return __atomic_load_n(&b.durable_descs, __ATOMIC_ACQUIRE) != 0; }
inline void set_descriptors_durable(BlockDesc& b, bool durable) {
  __atomic_store_n(&b.durable_descs, uint8_t{durable}, __ATOMIC_RELEASE);
}
static_assert(std::atomic<uint64_t>::is_always_lock_free);
// Where format version 3 keeps the shared atomics (docs/region-format.md).
// Version 2 had remote_head (32 bits) at 48, owner_word at 52, pending_next
// at 56 and padding at 60: owner_word stays put across the upgrade.
static_assert(offsetof(BlockDesc, pending_next) == 48);
static_assert(offsetof(BlockDesc, owner_word) == 52);
static_assert(offsetof(BlockDesc, remote) == 56);
static_assert(offsetof(BlockDesc, durable_descs) == 45);
static_assert(offsetof(BlockDesc, chain_group) == 46);
// Version 4 keeps an in-use block's taken word where a free run keeps its
// LRU links (region_upgrade.h).
static_assert(offsetof(BlockDesc, taken) == 32 && offsetof(BlockDesc, lru) == 32);

// A thread heap's mailbox: blocks that received remote frees while the owner
// was not looking are pushed here (see remote_free.h).
// An owner id is a slot index plus the slot's generation, so that a
// notification meant for a thread that has gone never reaches the next thread
// to take the same slot.
inline constexpr uint32_t kOwnerSlotBits = 12;
inline constexpr uint32_t kMaxOwnerSlots = 1u << kOwnerSlotBits;
inline constexpr uint32_t kPendingClosed = UINT32_MAX;
// in_use says who holds the slot: 0 nobody, else a holder tag (a client's
// lease slot + 1, or kProcessHolder in a process-private arena). Claimed by
// CAS by the holder itself; cleared by it, or by the page-heap owner when the
// holder is found dead.
inline constexpr uint32_t kProcessHolder = 0xffffu;
struct alignas(64) OwnerSlot {
  std::atomic<uint64_t> pending;   // generation << 32 | (block page + 1, 0: empty, kPendingClosed)
  std::atomic<uint32_t> in_use;    // holder tag, 0: free
  uint32_t pad[13];
};
static_assert(sizeof(OwnerSlot) == 64);

// A client process's lease: one slot per process attached to a shared
// region. Written by the page-heap owner only; read by anyone (stat tools).
enum class LeaseState : uint32_t {
  kFree = 0,
  kActive = 1,      // a live process holds blocks under this slot
  kReclaiming = 2,  // its process died; its blocks are being taken back
};
struct alignas(64) LeaseSlot {
  std::atomic<LeaseState> state;
  uint32_t generation;             // bumped every time the slot is given out
  int32_t pid;
  OwnerId stash_owner;             // owner id of the client's spare (leased, unused) blocks
  uint64_t start_time;             // process start (clock ticks after boot): pid + this = identity
  std::atomic<uint64_t> blocks;    // blocks held now
  std::atomic<uint64_t> leases;    // lease requests served
  uint64_t leased_at_ms;           // wall clock of the grant (for tools)
  uint64_t pad[2];
};
static_assert(sizeof(LeaseSlot) == 64);

// A named root: an object found by name after a restart or from another
// process. State changes under the header's roots lock.
enum class RootState : uint32_t { kFree = 0, kConstructing = 1, kReady = 2 };
inline constexpr uint32_t kRootNameMax = 95;
struct alignas(64) RootEntry {
  std::atomic<RootState> state;
  uint32_t name_len;
  Offset offset;                   // of the object in the data pages
  uint64_t size;                   // bytes asked for
  uint64_t type;                   // hash of the type's name
  char name[kRootNameMax + 1];
};
static_assert(sizeof(RootEntry) == 128);

// Free-run bins of the page heap: exact sizes up to kExactRunBins pages, then
// one bin per power of two.
inline constexpr uint32_t kExactRunBins = 128;
inline constexpr uint32_t kRunBins = kExactRunBins + 26;
inline constexpr uint32_t kRunBinWords = (kRunBins + 63) / 64;

struct RunBins {
  PageIndex head[kRunBins];
  uint64_t nonempty[kRunBinWords];
};

// Page-heap state and counters. Written by the page-heap owner only.
struct PageHeapState {
  std::atomic<uint32_t> committed_pages;  // data pages usable so far (read by anyone)
  uint32_t table_pages;       // descriptor entries committed so far
  uint32_t in_use_pages;      // pages in blocks and huge objects
  uint32_t dirty_pages;       // free pages that may be resident
  uint32_t discarded_pages;   // free pages given back to the system (zero)
  PageIndex lru_oldest;       // dirty runs, oldest first
  PageIndex lru_newest;
  uint32_t refault_pages;     // discarded pages handed out again (decayed by the policy)
  uint64_t discard_calls;     // discard (madvise/punch) calls made
  uint64_t discarded_total;   // pages discarded since creation
  RunBins dirty;
  RunBins clean;
};

inline constexpr uint32_t kMaxClassTable = 64;

struct RegionHeader {
  // --- identity, validated at open before anything else is trusted ---
  uint64_t magic;             // written last at format: a half-made region never validates
  uint32_t version;
  uint32_t page_size;
  uint32_t header_bytes;      // sizeof(RegionHeader) of the writer
  uint32_t method;            // memd::Method
  uint32_t discipline;        // memd::Discipline it was created with
  uint32_t max_pages;         // data pages the reservation can hold
  uint32_t max_owners;        // owner slots (thread heaps)
  uint32_t max_clients;       // lease slots (processes)
  uint32_t max_roots;
  uint32_t class_count;       // segregated classes (indices below it)
  uint64_t slots_offset;      // byte offsets from the region base
  uint64_t lease_offset;
  uint64_t roots_offset;
  uint64_t page_desc_offset;
  uint64_t block_desc_offset;
  uint64_t data_offset;
  uint64_t total_bytes;       // the whole region: the object's length
  uint64_t preferred_base;    // where the creator mapped it; others try the same
  uint64_t secret;            // random, for double-free tags
  uint16_t class_sizes[kMaxClassTable];  // object size of each class below kMaxClassTable
  HeapParams params;  // its last field filled what was padding: the header's length stayed
  // --- lifecycle (page-heap owner) ---
  std::atomic<uint64_t> generation;   // owner opens since creation
  std::atomic<uint32_t> clean_close;  // 1 once the last owner closed; 0 while one is open
  int32_t owner_pid;
  uint64_t recoveries;                // opens that found an unclean close
  uint64_t leaked_objects;            // objects lost to crashes, as recovery counted them
  pthread_mutex_t roots_lock;         // robust, process-shared
  // --- the heap ---
  std::atomic<uint32_t> next_owner_hint;
  std::atomic<uint32_t> abandoned_frees;  // remote frees into ownerless blocks (a hint to sweep)
  PageHeapState page_heap;
};
// A field added to HeapParams takes what was padding before `generation`;
// one more would move every field after it.
static_assert(offsetof(RegionHeader, params) + sizeof(HeapParams) == offsetof(RegionHeader, generation));

// Byte sizes of the parts of a region holding `max_pages` data pages.
struct RegionGeometry {
  uint64_t slots_offset, lease_offset, roots_offset, page_desc_offset, block_desc_offset,
      data_offset, total_bytes;
  static RegionGeometry compute(uint32_t max_pages, uint32_t max_owners, uint32_t max_clients = 0,
                                uint32_t max_roots = 0);
};

// A process's view of a mapped region: the mapping address plus the derived
// table addresses. Cheap to copy; never stored inside a region.
struct Region {
  char* base = nullptr;
  RegionHeader* header = nullptr;
  OwnerSlot* slots = nullptr;
  LeaseSlot* leases = nullptr;
  RootEntry* roots = nullptr;
  PackedPageDesc* page_descs = nullptr;
  BlockDesc* blocks = nullptr;
  char* data = nullptr;
  size_t data_bytes = 0;  // the whole reservation for data pages
  uint32_t data_pages = 0;  // the same in pages
  // The table sizes as the header gave them at attach. Code that indexes a
  // table bounds the index by these, never by the header read again: a
  // process that maps the region may rewrite the header at any instant,
  // even between a check of it and a use.
  uint32_t max_owners = 0;
  uint32_t max_clients = 0;
  uint32_t max_roots = 0;
  // The secret likewise: a stray write to the header's copy after attach
  // must not make this process's tags and marks (free objects, method
  // chunks, debug blocks) unrecognisable, and with them leak what they mark.
  uint64_t secret = 0;

  static Region attach(char* base);

  PageDesc page(PageIndex p) const {
    return PageDesc::unpack(page_descs[p.value].load(std::memory_order_acquire));
  }
  void set_page(PageIndex p, PageDesc d) const {
    page_descs[p.value].store(d.pack(), std::memory_order_release);
  }
  BlockDesc& block(PageIndex p) const { return blocks[p.value]; }
  // Pages the reservation holds, as this process mapped it (not as the
  // header, which its clients may overwrite, says).
  uint32_t page_limit() const { return data_pages; }
  // Pages handed to the page heap so far, as the header says, cut to
  // page_limit(): the header's count is memory clients write, so it bounds a
  // walk or an index only once it is bounded by this process's mapping.
  uint32_t committed_pages(std::memory_order order = std::memory_order_acquire) const {
    uint32_t n = header->page_heap.committed_pages.load(order);
    return n < data_pages ? n : data_pages;
  }
  // Where a table (page_descs, blocks) starts in the mapping, as this
  // process attached it: the header's offsets are memory clients write.
  uint64_t offset_in_mapping(const void* table) const {
    return static_cast<uint64_t>(static_cast<const char*>(table) - base);
  }
  PageIndex index_of(const BlockDesc& b) const {
    return {static_cast<uint32_t>(&b - blocks)};
  }
  char* page_address(PageIndex p) const { return data + (size_t{p.value} << kPageShift); }
  // The page's number in this process's address space (for alignment).
  uint64_t page_number(PageIndex p) const { return (reinterpret_cast<uintptr_t>(data) >> kPageShift) + p.value; }
  Offset offset_of(const void* p) const { return static_cast<const char*>(p) - data; }
  // Whether p lies in the region's data pages. Their descriptors are always
  // readable (the page-descriptor table is committed whole, and reads as
  // kUncommitted where no page was ever handed out).
  bool contains(const void* p) const {
    return reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(data) < data_bytes;
  }
};

}  // namespace memd::heap
