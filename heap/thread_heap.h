// A thread heap: the blocks one owner (a thread of some process) allocates
// from, one list pair per size class (Vam's ordered per-size allocation), and
// its large-object heap. Only its owner thread calls it, except where noted.
//
// The call tree of an allocation:
//
//   alloc(size)
//     size <= medium_max: alloc_segregated(cls)      [inline, no lock]
//       block_pop_free(cur)                           its free list
//       alloc_slow(cls)                               [out of line]
//         block_pop(cur)                              its bump space
//         alloc_refill(cls)                           [out of line]
//         take_pending()                              remote frees others told us of
//         collect cur's remote list; else cur -> full list; next available
//         unpark_block() / source.acquire()           an empty block of ours of the same
//                                                     length (the lookaside), else adopt,
//                                                     else a fresh block
//     size <= large_max: large_.alloc()               best fit in large blocks
//     else: a run this thread freed of a similar size, else source.acquire_huge()
//
//   free(p)
//     try_free_local(p)                               [inline, no call]
//       page descriptor of p -> kind, class, block    [one load]
//       ours, block stays on its list: block_push_local
//     free_slow(p)                                    [out of line]
//       block was full / becomes empty -> after_local_free (an empty block: kept
//         for its class, else parked in the lookaside, else released)
//       another owner's block: free_remote (claim, gathered per block)  [lock-free]
//       large: free_big (the owner's unsampled chunk: quick cache)
//       huge: free_huge_object (a run up to 1 MiB: this thread's huge cache)
#pragma once

#include <cstddef>
#include <cstdint>

#include "heap/block.h"
#include "heap/block_source.h"
#include "heap/heap_counters.h"
#include "heap/large_heap.h"
#include "heap/layout.h"
#include "heap/pool_method.h"
#include "heap/remote_free.h"
#include "heap/sampling.h"
#include "heap/size_class.h"

namespace memd::heap {

enum class FreeStatus : uint8_t { kOk, kInvalid, kDoubleFree };

// Where a pointer lives, from its page descriptor.
struct PointerInfo {
  PageKind kind = PageKind::kUncommitted;
  PageIndex block = kNoPage;
  uint32_t cls = 0;
  uint32_t in_block = 0;  // byte offset of p from the block start
};

class ThreadHeap {
 public:
  // REQUIRES: `id` is a fresh owner id whose pending stack is open. A heap
  // may be initialized again for a new owner once the last one abandoned it
  // (a pool reuses one per owner slot): everything is reset but the
  // telemetry counts, which stay cumulative across the owners it served.
  void init(const Region& r, const SizeClasses* classes, BlockSource* source, OwnerId id);
  // Adds this heap's telemetry counts to `out`. Any thread may call it at
  // any time, once the heap is constructed.
  void add_counters(CounterSnapshot* out) const;

  OwnerId id() const { return id_; }
  const Region& region() const { return region_; }

  // Any size; nullptr with errno ENOMEM when memory runs out.
  __attribute__((always_inline)) inline void* alloc(size_t size) {
    if (__builtin_expect((sample_countdown_ -= static_cast<int64_t>(size)) < 0, 0)) {
      return alloc_sampled(size, 0, nullptr);
    }
    if (__builtin_expect(size <= medium_max_, 1)) {
      return alloc_segregated(SizeClasses::class_of(size));
    }
    return alloc_big(size, 0, nullptr);
  }
  // alloc's fast path alone, with no call in it: an object of a segregated
  // class from the current block (its free list, else its never-used
  // space), or nullptr where alloc would do more (sample, take a new block,
  // a big size), having changed nothing. For wrappers that must stay
  // frameless (Region::alloc).
  //
  // Shorter than alloc's way there, for the pair it serves most: one
  // unsigned compare bounds the size both ways (0 wraps above every class);
  // a linear class's list is addressed from the size alone (no clamp to the
  // smallest class: 1..16 bytes all land on it); the countdown is tested
  // by the sign of what it would become.
  __attribute__((always_inline)) inline void* try_alloc_fast(size_t size) {
    if (__builtin_expect(size - 1 >= medium_max_, 0)) return nullptr;
    ClassList* cl;
    if (__builtin_expect(size <= kLinearMax, 1)) {
      cl = linear_class_list(size);
    } else {
      cl = &class_list(SizeClasses::class_of(size));
    }
    const int64_t left = sample_countdown_ - static_cast<int64_t>(size);
    if (__builtin_expect(left < 0, 0)) return nullptr;
    BlockDesc& b = *cl->cur;
    uint32_t head = b.free_head;
    if (__builtin_expect(head != 0, 1)) {
      sample_countdown_ = left;
      count_one(cl->counts.allocs);
      return block_pop_free(b, cl->cur_base, head);
    }
    return try_alloc_bump(*cl, left);
  }
  // The fast path takes from the current block's free list only; a fresh
  // block's bump space is the slow path's first resort. One path to the
  // count keeps the compiler from merging the two paths' tails, which costs
  // the common one instructions.
  __attribute__((always_inline)) inline void* alloc_segregated(uint32_t cls) {
    ClassList& cl = class_list(cls);
    BlockDesc& b = *cl.cur;
    uint32_t head = b.free_head;  // read once: the count's asm would make the compiler read it again
    if (__builtin_expect(head != 0, 1)) {
      count_one(cl.counts.allocs);
      return block_pop_free(b, cl.cur_base, head);
    }
    return alloc_slow(cls);
  }
  // Zero-filled; skips the memset for memory known to be fresh.
  void* alloc_zeroed(size_t size);
  // n objects of `size` into out[0..n): what n calls of alloc give, with
  // the class found once and a block's free list drained in one loop (the
  // user-mode page allocator's batch call). Returns how many it made; fewer
  // than n only when memory runs out (errno ENOMEM).
  size_t alloc_batch(size_t n, size_t size, void** out);
  // An object of `size` near `hint` (the TP/Medius allocation hints): from
  // the free objects of the hint's own block within `near_bytes` of it
  // (among the first kNearProbes of the block's free list), else -- when
  // near_bytes reaches the block -- any free object of that block, else
  // what alloc gives. The hint's block serves only if this thread owns it
  // and its class is the size's; any other hint (nullptr, another heap's,
  // a big object) is the plain path. Never slower than a few loads more.
  static constexpr int kNearProbes = 8;
  void* alloc_near(size_t size, const void* hint, size_t near_bytes);
  // An object of `size` from the blocks of call-chain pool `group` (the DPA
  // paper's pools: objects of one allocation chain kept in blocks of their
  // own, so a structure they form is walked over fewer lines and pages).
  // Groups are 1..kMaxChainGroups, named by the caller (region/chain_pools.h
  // maps call chains to them); each has its own list pair per size class,
  // up to kChainGroupMaxSize bytes. Group 0, a bigger size, or a group
  // whose lists cannot be made is what alloc gives. Frees need nothing
  // special: a group's blocks are this heap's, found by their descriptors.
  static constexpr uint32_t kMaxChainGroups = 32;
  static constexpr uint32_t kChainGroupMaxSize = 256;
  // A full block goes back on its available list once 1/kUnfullFraction of
  // its objects (at least one) are free again (unfull_below, per class).
  // Under random frees, a block returned at its first free was used up
  // again by the next allocation: nearly every free and every allocation
  // took a slow path (blocks of 64 objects, 4,096 live ones replaced at
  // random: 24 ns a pair under the shim, 12 ns with the wait). Waiting for a
  // share of the block keeps both on their fast paths, at the cost of up to
  // that share of a full block's memory held free.
  static constexpr uint32_t kUnfullFraction = 8;
  // The lookaside of empty blocks (ParkedBlocks, below) holds at most this
  // many blocks and pages.
  static constexpr uint32_t kParkedSlots = 8;
  static constexpr uint32_t kParkedMaxPages = 64;  // 256 KiB
  // Inline: a pop from the group's current block (its free list, else its
  // bump space); the rest in alloc_grouped_slow.
  __attribute__((always_inline)) inline void* alloc_grouped(size_t size, uint32_t group) {
    if (__builtin_expect(size <= kChainGroupMaxSize && sample_countdown_ >= static_cast<int64_t>(size), 1)) {
      uint32_t cls = SizeClasses::class_of(size);
      // A group's blocks are often fresh (a structure being built): their
      // bump space is a fast path too. Counted in the class's own list.
      if (ClassList* cl = group_list_if_ready(group, cls); __builtin_expect(cl != nullptr, 1)) {
        if (void* p = pop_current(*cl, lists_[cls].counts.allocs, static_cast<int64_t>(size))) return p;
      }
    }
    return alloc_grouped_slow(size, group);
  }
  void* alloc_grouped_slow(size_t size, uint32_t group);
  // The object its caller last noted for `group` (1..kMaxChainGroups), and
  // `p` noted in its place: per thread state for whoever pools by groups
  // (region/chain_merge.h scans a group's earlier objects), kept here rather
  // than in thread-local storage, which a library loaded by dlopen has
  // little of. nullptr if none, or for a group out of range.
  void* swap_last_grouped(uint32_t group, void* p) {
    if (group == 0 || group > kMaxChainGroups) return nullptr;
    void* was = last_grouped_[group];
    last_grouped_[group] = p;
    return was;
  }
  // `align` a power of two; any size.
  void* alloc_aligned(size_t size, size_t align);
  // An object recovery finds from descriptors alone, whatever other writes
  // reach the medium before a power cut: a segregated object (its block's
  // descriptor and its own free tag say), or, in place of a large chunk,
  // whole pages of its own (a huge run: at most a page more). Recovery finds
  // large chunks by their headers, and the header of a chunk freed since the
  // last checkpoint can still read as live on the medium where a new object
  // now lies (Region::reserve, for failure-atomic publish).
  void* alloc_recoverable(size_t size);

  // Whether p lies in the region's data pages, and its offset there: the
  // bound every free path checks first, from this heap's own copy of the
  // mapping (one subtraction that try_free_local_at reuses).
  __attribute__((always_inline)) inline bool in_data(const void* p, Offset* off) const {
    *off = static_cast<Offset>(static_cast<const char*>(p) - data_);
    return *off < data_bytes_;
  }

  // The common free, inline and with no call: a valid object of one of our
  // own segregated blocks whose block neither leaves the full list nor
  // empties. Returns false, having changed nothing, for anything else
  // (call free_slow with `*page_desc`, the packed descriptor of p's page
  // this read). REQUIRES: in_data(p, &off).
  __attribute__((always_inline)) inline bool try_free_local_at(void* p, Offset off, uint64_t* page_desc) {
    *page_desc = page_descs_[off >> kPageShift].load(std::memory_order_acquire);
    PageDesc d = PageDesc::unpack(*page_desc);
    if (__builtin_expect(d.kind != PageKind::kSegregated, 0)) return false;
    SegregatedFree f = segregated_free(p, off, d);
    BlockDesc& b = *f.block;
    // Below the bump is below the end: on_object suffices. The slow path
    // takes the frees that move a block between lists: a full block's that
    // leaves it with room enough (unfull_below), and the one that empties
    // a block other than the current one (a full block is never current).
    // The owner's fields (bump, flags, used) are read only once the block is
    // known to be ours: another thread may be writing its own block's.
    if (__builtin_expect(!f.on_object || load_tag(f.obj) == f.tag ||
                             owner_of(b.owner_word.load(std::memory_order_relaxed)) != id_ ||
                             f.in_block >= b.bump ||
                             (b.used <= free_floor_[d.cls][b.flags & kBlockFull] && &b != f.cl->cur),
                         0)) {
      return false;
    }
    // Counted before the push: the class list's address is still in a
    // register (after, the compiler computes it again).
    count_one(f.cl->counts.frees);
    block_push_local(b, f.obj, f.in_block, f.tag);
    return true;
  }
  // The packed descriptor of p's page, as try_free_local_at reads it.
  // REQUIRES: region().contains(p).
  uint64_t page_desc_of(const void* p) const {
    return page_descs_[static_cast<Offset>(static_cast<const char*>(p) - data_) >> kPageShift].load(
        std::memory_order_acquire);
  }
  // The same; REQUIRES: region().contains(p).
  __attribute__((always_inline)) inline bool try_free_local(void* p, uint64_t* page_desc) {
    return try_free_local_at(p, static_cast<Offset>(static_cast<char*>(p) - data_), page_desc);
  }

  // The common free past try_free_local (which read `page_desc`): a valid,
  // live object of another owner's segregated block, freed with no system
  // call (free_remote). Returns false, having changed nothing, for anything
  // else, a double free included (call free_slow). Kept out of
  // try_free_local: the registers it needs there cost the local free a
  // saved register.
  __attribute__((always_inline)) inline bool try_free_remote(void* p, uint64_t page_desc) {
    PageDesc d = PageDesc::unpack(page_desc);
    // The owner first: our own blocks' frees (a full block's, an emptying
    // one's) come here too, and go on at once.
    if (__builtin_expect(d.kind != PageKind::kSegregated ||
                             owner_of(blocks_[d.block].owner_word.load(std::memory_order_relaxed)) == id_,
                         0)) {
      return false;
    }
    SegregatedFree f = segregated_free(p, static_cast<Offset>(static_cast<char*>(p) - data_), d);
    if (__builtin_expect(!f.object_start() || load_tag(f.obj) == f.tag, 0)) return false;
    return free_remote(f) == FreeStatus::kOk;
  }

  // Any free. REQUIRES: region().contains(p).
  __attribute__((always_inline)) inline FreeStatus free(void* p) {
    uint64_t page_desc;
    if (__builtin_expect(try_free_local(p, &page_desc), 1)) return FreeStatus::kOk;
    return free_slow(p, page_desc);
  }
  // free past try_free_local: bad pointers, remote frees, blocks that change
  // lists, large and huge objects.
  FreeStatus free_slow(void* p, uint64_t page_desc);

  // Whether p is the start of a live object (what free would accept).
  // Owner-independent; REQUIRES: region().contains(p).
  FreeStatus validate(const void* p) const;

  // Resizes the live object at p without moving it, when its class or the
  // free space after it allows. Returns whether it did.
  bool resize_in_place(void* p, size_t size);

  // Resizes in place, else moves (copying the contents). nullptr (and p
  // untouched) on failure. REQUIRES: validate(p) == kOk.
  void* realloc(void* p, size_t size);
  // realloc's copy of `bytes` from `from` to `to`: huge to huge by moving
  // the pages where the source can (anonymous memory), leaving `from`
  // reading as zero; else memcpy.
  void move_or_copy(void* to, void* from, size_t bytes);

  // Payload bytes of the object at p (a live object of this region).
  size_t usable_size(void* p) const;

  // Where p lives, from its page descriptor. REQUIRES: region().contains(p).
  inline PointerInfo locate(const void* p) const {
    Offset off = region_.offset_of(p);
    PageDesc d = region_.page(PageIndex{static_cast<uint32_t>(off >> kPageShift)});
    return {d.kind, PageIndex{d.block}, d.cls,
            static_cast<uint32_t>(off - (Offset{d.block} << kPageShift))};
  }

  // Takes the remote frees others told us of (cheap when there are none).
  void take_pending();
  // Collects every remote free, releases every empty block (compaction).
  void release_empty();
  // Thread exit: collects what it can, releases empty blocks and abandons the
  // rest for others to adopt. The heap is unusable afterwards.
  void abandon_all();
  // Forgets every block without touching them (the region was cleared).
  void reset();
  // Never keep a freed huge run for reuse: for a heap used by many threads
  // at once (the arena's stranger).
  void disable_huge_cache() { huge_cache_allowed_ = false; }
  // Remote frees (of objects of other owners' blocks) can gather, per size
  // class, into a chain of one block's objects that reaches the block's
  // remote list in one push of up to kRemoteBatch objects (of at most
  // kRemoteBatchBytes in all): when a free of the class meets another block,
  // when the chain is full, on this heap's allocation slow path, and at
  // flush_remote_frees. Until then the owner
  // cannot reuse them (they count as in use in their block). Off by
  // default, and only for heaps of a process-private arena: a chain lives in
  // the process, so a process that dies with one in a shared region would
  // leak it (there each free pushes at once, and a kill leaks at most the
  // object in flight). Flush before a heap is put aside for a later thread.
  static constexpr uint32_t kRemoteBatch = 64;
  static constexpr uint32_t kRemoteBatchBytes = 16 * 1024;  // at most this much of a class waits
  void enable_remote_batching() { remote_batching_ = true; }
  // A batch of frees (free_batch) gathers remote frees into chains even
  // where batching is off, and pushes them before it returns: n frees of
  // another owner's block cost one push, and a process killed during the
  // call leaks at most that call's objects, the ones in flight.
  class GatherRemoteFrees {
   public:
    explicit GatherRemoteFrees(ThreadHeap* h) : h_(h), was_(h != nullptr && h->remote_batching_) {
      if (h_ != nullptr) h_->remote_batching_ = true;
    }
    ~GatherRemoteFrees() {
      if (h_ == nullptr) return;
      h_->remote_batching_ = was_;
      h_->flush_remote_frees();
    }
    GatherRemoteFrees(const GatherRemoteFrees&) = delete;
    GatherRemoteFrees& operator=(const GatherRemoteFrees&) = delete;

   private:
    ThreadHeap* h_;
    bool was_;
  };
  void flush_remote_frees() {
    if (remote_batched_[0] | remote_batched_[1]) flush_remote_batches();
  }
  // The owner id a huge free or resize claims its run with (this heap's own
  // id unless set): the stranger of a leasing process claims with the
  // process's stash id, an owner slot the region's owner knows it holds.
  void set_claim_id(OwnerId id) { claim_id_ = id; }

 private:
  // A doubly linked list of blocks through BlockDesc::prev/next.
  struct BlockList {
    PageIndex head = kNoPage;
    PageIndex tail = kNoPage;
  };

  // One cache line per class: the current block and what free needs of the
  // class (copied from SizeClasses, so the fast paths chase no pointer).
  struct alignas(64) ClassList {
    BlockDesc* cur;       // head of the available list, or the empty sentinel
    char* cur_base;
    uint32_t size;
    uint32_t end;         // in-block offset past the last object
    uint32_t reciprocal;  // see SizeClasses::object_index
    uint32_t empty_kept;  // empty blocks kept on the available list
    BlockList avail;      // blocks with room; the head is `cur`
    BlockList full;       // blocks with no room
    ClassCount counts;    // telemetry; cumulative, never reset by init
  };
  static_assert(sizeof(ClassList) == 64);

  // The fast paths' way to a class list: its address in a register, which
  // every field (the count's asm included) is addressed from. Indexed
  // directly, GCC rebuilds the address from the class for the asm operand,
  // which costs the counted build instructions the uncounted one lacks.
  __attribute__((always_inline)) ClassList& class_list(uint32_t cls) {
    ClassList* cl = &lists_[cls];
    asm("" : "+r"(cl));
    return *cl;
  }
  // The list of linear class for a request of `size` (1..kLinearMax bytes):
  // class_of(size) without its clamp, since (size - 1) / kObjectAlign + 1
  // is 1 for every size up to 16, the index of the smallest class in
  // kObjectAlign units. In a register, as class_list.
  __attribute__((always_inline)) ClassList* linear_class_list(size_t size) {
    static_assert(kMinObject == kObjectAlign, "sizes up to kObjectAlign all take the smallest class");
    constexpr uint32_t kListsPerStep = kObjectAlign / kGranule;
    ClassList* cl = &lists_[kListsPerStep] + ((size - 1) / kObjectAlign) * kListsPerStep;
    asm("" : "+r"(cl));
    return cl;
  }
  // try_alloc_fast past an empty free list: the current block's never-used
  // space, with the countdown left at `left`; else nullptr, having changed
  // nothing.
  __attribute__((always_inline)) inline void* try_alloc_bump(ClassList& cl, int64_t left) {
    BlockDesc& b = *cl.cur;
    if (__builtin_expect(b.bump >= b.end, 0)) return nullptr;
    sample_countdown_ = left;
    count_one(cl.counts.allocs);
    return block_pop_bump(b, cl.cur_base, cl.size);
  }
  // A pop from `cl`'s current block: its free list, else its never-used
  // space; nullptr if it has neither (the empty block's end is 0), having
  // changed nothing. A success counts in `count` and takes `charge` bytes
  // off the sample countdown.
  __attribute__((always_inline)) inline void* pop_current(ClassList& cl, std::atomic<uint64_t>& count, int64_t charge) {
    BlockDesc& b = *cl.cur;
    uint32_t head = b.free_head;
    if (__builtin_expect(head != 0, 1)) {
      sample_countdown_ -= charge;
      count_one(count);
      return block_pop_free(b, cl.cur_base, head);
    }
    if (b.bump >= b.end) return nullptr;
    sample_countdown_ -= charge;
    count_one(count);
    return block_pop_bump(b, cl.cur_base, cl.size);
  }

  // What both free paths compute of a segregated object at p.
  struct SegregatedFree {
    ClassList* cl;
    BlockDesc* block;
    char* obj;
    uint32_t in_block;  // byte offset of p from the block start
    uint64_t tag;       // the tag a freed object at p carries
    bool on_object;     // p is at a multiple of the class's size...
    bool in_objects;    // ...before the block's end: an object's start
    bool object_start() const { return on_object & in_objects; }
  };
  // `off`: p's offset from data_.
  __attribute__((always_inline)) SegregatedFree segregated_free(void* p, Offset off, PageDesc d) {
    ClassList& cl = class_list(d.cls);
    uint32_t in_block = static_cast<uint32_t>(off - (Offset{d.block} << kPageShift));
    uint32_t idx = static_cast<uint32_t>((uint64_t{in_block} * cl.reciprocal) >> 32);
    return {&cl, &blocks_[d.block], static_cast<char*>(p), in_block, free_tag(secret_, off),
            idx * cl.size == in_block, in_block < cl.end};
  }

  // Per class: remote frees of one block claimed and linked, not yet pushed,
  // a chain from `head` (newest) to `tail` (oldest, whose link the push
  // sets), all in-block offsets + 1; block nullptr when there is none. The
  // two words of remote_batched_ have a bit set for each class with a chain.
  struct RemoteBatch {
    BlockDesc* block = nullptr;
    uint32_t head = 0;
    uint32_t tail = 0;
    uint32_t count = 0;
    uint32_t limit = 0;  // pushed at this count: kRemoteBatchBytes of objects, 1 to kRemoteBatch
  };
  // A remote free of f (an object start not carrying its free tag, in a
  // block another heap owns): claims the object by swapping its free tag in
  // (a racing free of it finds the tag and reports a double free), then
  // pushes it, or adds it to its class's chain (enable_remote_batching). A
  // chain's frees are counted when it is pushed.
  __attribute__((always_inline)) FreeStatus free_remote(const SegregatedFree& f) {
    if (!block_claim_remote(f.obj, f.tag)) return FreeStatus::kDoubleFree;
    RemoteBatch& rb = remote_batches_[f.cl - lists_];
    if (__builtin_expect(rb.block != f.block, 0)) return free_remote_other_block(f.cl, f.block, f.obj, f.in_block);
    link_of(f.obj) = rb.head;
    rb.head = f.in_block + 1;
    if (__builtin_expect(++rb.count >= rb.limit, 0)) flush_remote_batch(rb);
    return FreeStatus::kOk;
  }
  // free_remote of an object its class's chain cannot take (of another
  // block, or no chain yet), or of any object with batching off.
  // (Its arguments in registers: a SegregatedFree would go through memory.)
  __attribute__((noinline)) FreeStatus free_remote_other_block(ClassList* cl, BlockDesc* block, char* obj,
                                                               uint32_t in_block);
  __attribute__((noinline)) void flush_remote_batch(RemoteBatch& rb);
  __attribute__((noinline)) void flush_remote_batches();

  void* alloc_slow(uint32_t cls);  // the current block's bump space, else alloc_refill
  __attribute__((noinline)) void* alloc_refill(uint32_t cls);  // remote frees, another block
  // alloc_refill for list `cl` of class `cls` (a plain list: group 0, or a
  // call-chain group's), whose new blocks get `group` as their chain_group.
  void* refill_list(ClassList& cl, uint32_t cls, uint8_t group);
  // The list a block of ours is on: its group's, else its class's.
  ClassList& list_of(const BlockDesc& b) {
    if (__builtin_expect(b.chain_group != 0, 0)) {
      if (ClassList* g = group_list_if_ready(b.chain_group, b.cls)) return *g;
    }
    return lists_[b.cls];
  }
  // Group `group`'s list for `cls`, nullptr where the heap has none (an
  // unknown group or class, or lists not made).
  ClassList* group_list_if_ready(uint32_t group, uint32_t cls) {
    if (group == 0 || group > kMaxChainGroups || cls >= kChainGroupClasses || chain_groups_ == nullptr ||
        !((chain_groups_ready_ >> (group - 1)) & 1)) {
      return nullptr;
    }
    return &chain_groups_->lists[group - 1][cls];
  }
  // The same, making the heap's group lists as needed (mapped once per heap,
  // a group's initialized at its first use).
  ClassList* group_list(uint32_t group, uint32_t cls);
  // The current block of a list with none (thread_heap.cc).
  static BlockDesc* empty_sentinel();
  // f(list) for every class list of the heap: the plain ones, then each
  // ready group's.
  template <class F>
  void for_each_class_list(F&& f) {
    for (uint32_t cls = classes_->first_class(); cls <= classes_->last_class(); ++cls) f(lists_[cls]);
    for (uint32_t g = 1; g <= kMaxChainGroups; ++g) {
      for (uint32_t cls = classes_->first_class(); cls < kChainGroupClasses && cls <= classes_->last_class(); ++cls) {
        if (ClassList* cl = group_list_if_ready(g, cls)) f(*cl);
      }
    }
  }
  // The countdown passed zero: a sampled allocation, or not (with sampling
  // off, a look at whether it was turned on: see end_sample_countdown).
  void* alloc_sampled(size_t size, size_t align, bool* zeroed);
  // The countdown passed zero: restarts it, and says whether this
  // allocation of `size` is to be a sample.
  bool sample_due(size_t size);
  // The sampled allocation itself, out of line: with sampling off,
  // alloc_sampled runs every kSamplingProbeBytes, and stays short.
  __attribute__((noinline)) void* alloc_sample(size_t size, size_t align, bool* zeroed);
  // Any size at any alignment (0: none) without a look at the countdown:
  // the allocation every path falls back to when it does not sample.
  void* alloc_unsampled(size_t size, size_t align, bool* zeroed);
  // Large and huge objects. alloc_big and free_big are the common cases (a
  // quick-cached chunk; the owner's free of an unsampled chunk), the rest
  // is out of line.
  void* alloc_big(size_t size, size_t align, bool* zeroed);
  void* alloc_large(size_t size, size_t align, bool* zeroed);
  void* alloc_huge(size_t size, size_t align, bool* zeroed);
  // Zeroes a new object whose memory was not fresh.
  void zero_new(void* p, size_t size);
  FreeStatus free_big(void* p, uint64_t page_desc);  // the packed PageDesc of p's page
  FreeStatus free_big_slow(void* p, const PointerInfo& at);  // not a huge page
  FreeStatus free_big_uncounted(void* p, const PointerInfo& at);
  FreeStatus free_huge_object(void* p, uint64_t page_desc);  // any free of a huge page
  FreeStatus free_huge(PageIndex run);          // the run's start, freed and not counted
  void after_local_free(BlockDesc& b);
  void handle_empty(ClassList& cl, BlockDesc& b);
  // An empty block of `cl`, past what the class keeps: to the lookaside,
  // else back to the page heap. False if it stays (a notification for it is
  // in flight; decided when it arrives).
  bool give_back_empty(ClassList& cl, BlockDesc& b);
  // Classes whose blocks hold at least this many pages are big: an empty
  // block of one holds that much memory, resident where it was written,
  // that only its class can use (a buffer grown by realloc leaves one
  // behind in each class it passed). A big class whose current block is
  // empty at two calls of this in a row (made before the heap takes new
  // pages) is idle: its empty blocks go back, so their pages can serve any
  // size again.
  static constexpr uint32_t kBigBlockPages = 16;
  void retire_idle_big_blocks();
  void handle_pending_block(PageIndex block);
  void handle_empty_large(PageIndex block);

  void list_push_front(BlockList* list, PageIndex p);
  void list_push_back(BlockList* list, PageIndex p);
  void list_remove(BlockList* list, PageIndex p);
  void unfull(ClassList& cl, PageIndex p);
  // Whether B, a block of ours, is on the full list with room enough now to
  // go back on the available one (unfull_below).
  bool has_room_again(const BlockDesc& b) const { return (b.flags & kBlockFull) && b.used < unfull_below(b.cls); }
  void refresh_cur(ClassList& cl);
  void disown_blocking(BlockDesc& b);
  void retire_block(PageIndex p, bool empty);
  void release_huge_cache();

  // The lookaside of empty blocks (the user-mode page allocator's page
  // cache): empty segregated blocks past the one each class keeps, still
  // this heap's and on no list, handed to the next class whose blocks have
  // the same length and reclassed in place -- no lock, no page-heap search
  // or coalescing, no system call. Only where the source allows it
  // (BlockSource::parks_empty_blocks: private memory).
  struct ParkedBlocks {
    PageIndex blocks[kParkedSlots];
    uint32_t parked_at[kParkedSlots];  // `clock` when each was parked
    uint32_t count = 0;
    uint32_t pages = 0;
    uint32_t clock = 0;  // blocks this heap has asked for
    // Takes entry i, of `block_pages` pages, out; the later ones move up.
    void remove(uint32_t i, uint32_t block_pages) {
      for (uint32_t j = i + 1; j < count; ++j) {
        blocks[j - 1] = blocks[j];
        parked_at[j - 1] = parked_at[j];
      }
      --count;
      pages -= block_pages;
    }
  };
  // At a miss, a block parked more than this many block requests ago goes
  // back to the page heap: its length is not what the thread asks for now.
  static constexpr uint32_t kParkedMaxAge = 8;
  // Takes the empty block b off its list into the lookaside (the oldest
  // parked go back to make room). False, with nothing changed, where the
  // lookaside is off or a notification for b is in flight.
  bool park_block(ClassList& cl, BlockDesc& b);
  // A parked block of `pages` pages, its descriptors naming class `cls`;
  // kNoPage if none, the stale ones given back. `*intact`: it was a block of
  // `cls` whose free list holds every object it handed out, to be used as it
  // is; else the caller formats it.
  PageIndex unpark_block(PageCount pages, uint16_t cls, bool* intact);
  // Whether empty block b of this heap can serve again without block_init.
  bool reusable_unformatted(const BlockDesc& b) const;
  // Gives parked block i back to the page heap, unless a notification for
  // it is in flight. Returns whether it did.
  bool release_parked(uint32_t i);
  // Gives back every parked block (compaction; `closing`: at exit, waiting
  // out notifications in flight).
  void release_all_parked(bool closing);

  // calloc of a reused huge run at least this big zeroes it by discarding
  // its pages (BlockSource::zero_huge) rather than writing zeros: below it,
  // writing costs less than a system call and the faults that follow.
  static constexpr size_t kZeroByDiscardBytes = size_t{1} << 20;
  // Freed huge runs of up to this many pages may be kept by the thread that
  // freed them (bigger ones go back to the page heap, whose dirty cache
  // learns from refaults), at most kHugeCacheSlots of them.
  static constexpr uint32_t kHugeCachePages = 256;
  static constexpr uint32_t kHugeCacheSlots = 8;
  // The cache holds at most the pages of the cacheable huge runs this thread
  // allocated in its last window of this many (or in the window under way,
  // if more), and never less than kHugeCachePages: sized by recent demand.
  static constexpr uint32_t kHugeDemandWindow = 32;
  // At a miss, a kept run that more than this many huge allocations have
  // passed by (this one included) goes back to the page
  // heap before the page heap is asked. Where sizes keep changing (buffers
  // that grow, sizes drawn at random) a kept run fits no later request; kept
  // aside, it splits the free space and the page heap grows for the request
  // (wl_realloc_growth: peak RSS 1.57x glibc's kept for ever, 1.38x
  // released after 1; wl_big_realloc 0.94x and 0.81x; 3 rounds, paired). A
  // run freed just before the miss stays: it may be the next request's.
  static constexpr uint32_t kHugeCacheMaxAge = 1;

  // The freed huge runs this thread keeps (owner word: ours), oldest first.
  struct HugeCache {
    PageIndex runs[kHugeCacheSlots];
    uint32_t kept_at[kHugeCacheSlots];  // `clock` when each run was kept
    uint32_t count = 0;
    uint32_t clock = 0;          // huge allocations so far
    uint32_t pages = 0;          // held in all
    uint32_t window_allocs = 0;  // cacheable huge allocations in the window under way
    uint32_t window_pages = 0;   // and their pages
    uint32_t demand_pages = 0;   // pages of the last full window
    uint32_t cap() const {
      uint32_t d = demand_pages > window_pages ? demand_pages : window_pages;
      return d > kHugeCachePages ? d : kHugeCachePages;
    }
  };
  // A kept run of `pages` (to pages + pages/4: a similar size is reused as
  // it is) placed at `align_pages`, taken out of the cache; kNoPage if none.
  PageIndex huge_cache_take(PageCount pages, PageCount align_pages);
  // Keeps a freed run (claimed with our id), evicting the oldest past the cap.
  void huge_cache_put(PageIndex run);
  void huge_cache_note_alloc(PageCount pages);
  // At a miss: gives the page heap back the runs kept longer than
  // kHugeCacheMaxAge.
  void huge_cache_release_stale();

  // Hot copies of region and class facts.
  int64_t sample_countdown_ = kSamplingProbeBytes;  // bytes to the end of the countdown
  char* data_ = nullptr;
  uint64_t data_bytes_ = 0;  // the region's data pages, as this process mapped them
  PackedPageDesc* page_descs_ = nullptr;
  BlockDesc* blocks_ = nullptr;
  uint32_t medium_max_ = 0;
  uint32_t large_max_ = 0;

  Region region_{};
  const SizeClasses* classes_ = nullptr;
  BlockSource* source_ = nullptr;
  OwnerId id_ = kNoOwner;
  OwnerId claim_id_ = kNoOwner;  // see set_claim_id
  const OwnerSlot* my_slot_ = nullptr;
  uint64_t secret_ = 0;
  uint32_t empty_blocks_per_class_ = 1;
  // The big classes (bit cls - 64 * word) whose current block was empty at
  // the last retire_idle_big_blocks.
  uint64_t idle_big_[2] = {};
  uint32_t first_big_class_ = 0;  // classes from here on have big blocks (the table grows)
  void* last_grouped_[kMaxChainGroups + 1] = {};  // swap_last_grouped
  PageIndex kept_empty_large_ = kNoPage;    // one empty large block kept for reuse
  HugeCache huge_cache_;
  ParkedBlocks parked_;
  bool parking_allowed_ = false;  // the source's parks_empty_blocks
  uint32_t huge_cache_slots_ = kHugeCacheSlots;  // the source's huge_runs_kept
  bool huge_cache_allowed_ = true;
  bool remote_batching_ = false;  // kept by init: the heap's host decides once
  RemoteBatch remote_batches_[kMaxSegregatedClasses];
  uint64_t remote_batched_[2] = {0, 0};
  static_assert(kMaxSegregatedClasses <= 128, "two words of class bits");
  SampleDraws sample_draws_;
  // Call-chain pools: per group, a list pair per class up to
  // kChainGroupMaxSize. Mapped at a heap's first grouped allocation and
  // kept for the heap's life (heaps are reused, never destroyed); a group's
  // bit in chain_groups_ready_ once its lists are initialized for the
  // current owner.
  static constexpr uint32_t kChainGroupClasses = kChainGroupMaxSize / kGranule + 1;
  struct ChainGroupLists {
    ClassList lists[kMaxChainGroups][kChainGroupClasses];
  };
  static_assert(kMaxChainGroups <= 32, "one word of group bits");
  static_assert(kMaxChainGroups <= 255, "the group is a byte of the BlockDesc");
  ChainGroupLists* chain_groups_ = nullptr;
  uint32_t chain_groups_ready_ = 0;
  // free_floor_[cls][full]: the fast path's floor (try_free_local_at),
  // picked by the flag bit with no branch, since frees into full and
  // available blocks alternate at random: 1 for an available block, whose
  // last object's free empties it; for a full one, unfull_below: a full
  // block goes back on its available list once a free leaves fewer than
  // this many of its objects in use.
  static_assert(kBlockFull == 1);
  uint32_t free_floor_[kMaxSegregatedClasses][2];
  uint32_t unfull_below(uint32_t cls) const { return free_floor_[cls][kBlockFull]; }
  ClassList lists_[kMaxSegregatedClasses];
  LargeHeap large_;
  HeapCounters counters_;  // cumulative, never reset by init

 public:
  // The pool method's objects this thread has claimed (pool_method.h); given
  // back by abandon_all. Last: the best heap's hot fields stay in the first
  // cache lines of the object.
  PoolCache pool_cache;
};

}  // namespace memd::heap
