// What a memd::Region is made of in one process. The owner runs the page
// heap (PageHeapOwner) and serves leases; a client leases blocks through a
// channel (LeasedBlocks). Both allocate through a pool of thread heaps
// registered with the thread-heap registry, like a private heap.
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "region/leased_blocks.h"
#include "region/lease_service.h"
#include "region/lease_socket.h"
#include "region/thread_heap_pool.h"
#include "region/page_heap_owner.h"
#include "region/prefaulting_blocks.h"
#include "region/publish_log.h"
#include "region/region.h"
#include "region/thread_heaps.h"
#include "disciplines/shared_source.h"
#include "heap/layout.h"
#include "heap/method_chunks.h"
#include "heap/pool_method.h"
#include "heap/size_class.h"

namespace memd {

// The type hash a root carries (Region::type_hash).
uint64_t root_type_hash(const char* name);

class RegionImpl {
 public:
  std::string name;
  Discipline discipline = Discipline::kShm;
  // As the header said when this process mapped the region (it is not read
  // again: any process of the region may write the header).
  Method method = Method::kBest;
  // Pool and last: the method's state in the region, once looked up.
  mutable std::atomic<void*> method_state{nullptr};
  // Pool: every owner slot's cache record (heap/pool_method.h, the reserved
  // root "memd:pool-caches"), once looked up or made; nullptr if it could
  // not be (caches then go unrecorded).
  mutable std::atomic<heap::PoolCacheRecord*> pool_records{nullptr};
  std::unique_ptr<disciplines::SharedSource> source;
  heap::Region region{};
  std::unique_ptr<heap::SizeClasses> classes;
  bool read_only = false;
  bool damaged = false;  // its backing failed: closing touches none of its memory
  // Owner: the header's fixed part as it was when this process took the
  // region over (every process of the region can write the header).
  std::vector<char> header_copy;

  // Owner side (set iff this process owns the region).
  std::unique_ptr<region::PageHeapOwner> pages;
  std::unique_ptr<region::LeaseService> service;
  std::unique_ptr<region::SocketLeaseServer> server;
  // Client side.
  std::unique_ptr<region::LeaseChannel> channel;
  std::unique_ptr<region::LeasedBlocks> leased;
  region::PrefaultingBlocks prefault;  // between the thread heaps and their source (MEMD_PREFAULT)
  region::ClientLease lease{};

  region::ThreadHeapPool pool;
  region::ArenaHandle handle{};
  bool registered = false;
  // The generation the fast paths look up this thread's heap by (see
  // fast_heap_key()); 0 when they must not.
  uint32_t fast_key_ = 0;

  // The debug method's settings in this process (Region::set_debug_options,
  // Region::watch).
  Region::DebugOptions debug_options;
  static constexpr int kMaxWatches = 16;
  std::atomic<uintptr_t> watches[kMaxWatches] = {};
  std::atomic<int> watch_count{0};
  // Debug and profile: this process's cache of site indexes (region_debug.cc).
  static constexpr size_t kSiteCache = 256;
  std::atomic<uint64_t> site_cache[kSiteCache] = {};

  RegionEventHandler handler = nullptr;
  void* handler_context = nullptr;

  bool owner() const { return pages != nullptr; }
  // The pool and last methods take chunks from this process's best heap.
  class MethodChunks final : public heap::ChunkSource {
   public:
    explicit MethodChunks(RegionImpl* impl) : impl_(impl) {}
    char* alloc_chunk(size_t bytes) override {
      heap::ThreadHeap* h = impl_->thread_heap();
      return h ? static_cast<char*>(h->alloc(bytes)) : nullptr;
    }
    void free_chunk(char* chunk) override;
   private:
    RegionImpl* impl_;
  };
  MethodChunks method_chunks{this};
  // Whether alloc and free go straight to this thread's heap: the best
  // method, in a process that may write and has heaps, without chain pools.
  // refresh_data_plane() wherever one of its inputs changes.
  bool plain_data_plane() const { return fast_key_ != 0; }
  // What alloc and free give region::last_region_heap: the handle's
  // generation when plain_data_plane(), else 0 (which finds no heap). So
  // the fast path's one comparison tests both that the data plane is plain
  // and that this thread's last region heap is this region's.
  uint32_t fast_heap_key() const { return fast_key_; }
  void refresh_data_plane() {
    bool plain = !read_only & registered & (method == Method::kBest) & !chain_pools;
    fast_key_ = plain ? handle.generation : 0;
  }
  bool chain_pools = false;  // Region::set_chain_pools
  // This thread's heap of the region; nullptr and EPERM for an owner that
  // only serves leases (it has none).
  heap::ThreadHeap* thread_heap() {
    if (!registered) {
      errno = EPERM;
      return nullptr;
    }
    // Remembered: the fast paths find it next time without this call.
    return region::thread_heap_remembered(handle);
  }
  void event(RegionEvent e, const void* address, const char* what) const {
    if (handler != nullptr) handler(handler_context, e, address, what);
  }
  void keep_header_copy();
  // The bytes from the region's base to its last committed page: nothing
  // past them was written (what a checkpoint must make durable).
  size_t written_span() const {
    size_t end = static_cast<size_t>(region.data - region.base) + (size_t{region.committed_pages()} << heap::kPageShift);
    return std::min(source->reserved_bytes(), end);
  }
  // At an owner's open: roots a dead process left half constructed are
  // dropped (their objects leak, their names are free again); a root a live
  // client is constructing now is left for it to publish. `clients_alive`:
  // a client of the previous owner still runs (only such a process can hold
  // the roots lock: constructing needs a lease).
  void settle_roots(bool clients_alive);
  // A ready root's object (and its size), found without the roots lock;
  // nullptr if there is none of that name and type.
  void* ready_root(std::string_view name, uint64_t type, uint64_t* size = nullptr) const;
  // Owner: gives back the pool objects that the cache records of the owner
  // slots `dead` names held (region_methods.cc; nothing in a region of
  // another method). Before those slots can be reused.
  void return_pool_caches(const std::function<bool(uint32_t slot)>& dead);
  // Gives back what this process holds: its thread heaps' blocks, its stash.
  void detach_all();

  // The failure-atomic publish's log (publish_log.h, the reserved root
  // "memd:publish-log"), once found; nullptr if it has not been made.
  mutable std::atomic<region::PublishEntry*> publish_log{nullptr};
  region::PublishEntry* find_publish_log() const;
  // Owner: settles the log's entries of the holders `dead` names (an open
  // recovering the region, a dead client's reclaim).
  // `live` (offset of an object): see region::settle_publish_log.
  void settle_publish_log(const std::function<bool(uint32_t holder)>& dead,
                          const std::function<bool(uint64_t object)>& live = nullptr);
  // Persists [p, p + n) of the mapping, by discipline; failures are the
  // discipline's to report.
  region::PersistFn persist_fn() const;
  // Makes the live object p of `bytes` durable with its allocation: its
  // bytes, its block's page descriptors and descriptor, the header.
  void persist_allocation(const void* p, size_t bytes) const;
};

}  // namespace memd
