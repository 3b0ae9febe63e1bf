// The one interface every shared or persistent heap under test implements, so
// the same driver (bench_shared_heap.cc) and the same loop run on all of them.
//
// A *family* is one allocator as the runner names it ("boost-shm",
// "pmemobj-tx", "memd-shm", ...). The driver's parent process asks the family
// to create the heap, then forks the workers; each worker opens (attaches to)
// the heap by name and gets its own Heap handle. Workers allocate and free
// concurrently in the one heap. Afterwards the parent checks that the objects
// the workers left live show up in its own view of the heap, and removes it.
//
// A family registers itself with a static Registration in its own source file,
// so adding an allocator means adding a source file to the executable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace shb {

struct Config {
  std::string workload;  // "shared_small" or "persistent_small"
  std::string dir;       // where files go: mapped files, pools, sockets
  std::string stem;      // unique per run: names of shm objects and files
  size_t heap_bytes = 0;  // segment / pool / region size
  int workers = 1;
  uint32_t slots = 0;  // ring size of each worker (pmemobj keeps its ring in the pool)
  uint32_t max_size = 0;  // largest object the loop asks for (--max-size)
  std::string daemon_socket;  // memd-daemon: a running memd's socket (empty: start one)
  std::string memd_binary;    // memd-daemon: the memd to start (empty: the one built with this program)
};

// One worker's handle on the heap. Used by one thread.
class Heap {
 public:
  virtual ~Heap() = default;
  // `slot` is the ring slot the object goes into (only pmemobj, which keeps
  // the ring in the pool, uses it). nullptr when the heap is out of memory.
  virtual void* alloc(uint32_t slot, size_t size) = 0;
  virtual void free(uint32_t slot, void* p) = 0;
  // Frees `old` and allocates the slot's next object. A transactional family
  // does both in one transaction.
  virtual void* replace(uint32_t slot, void* old, size_t size) {
    free(slot, old);
    return alloc(slot, size);
  }
  // Bracket the untimed filling of the live set. A family whose every
  // allocation is made durable on its own (pmemobj with msync: milliseconds
  // each) may batch the fill, e.g. into one transaction.
  virtual void fill_begin() {}
  virtual void fill_end() {}
  // Offset of p from the start of the heap's mapping (the same in every process).
  virtual uint64_t offset(const void* p) const = 0;
  // The value the creator stored in the heap: proves this worker opened the
  // very object the parent created.
  virtual uint64_t token() const = 0;
  // Calls to a remote party for memory this worker has made so far (memd's
  // lease RPCs to the daemon), -1 if the family cannot count them.
  virtual int64_t remote_calls() const { return -1; }
};

class Family {
 public:
  virtual ~Family() = default;
  // Parent, before the workers exist: makes the backing store and stores `token`.
  virtual void create(uint64_t token) = 0;
  // In a worker process (after fork): opens or attaches to the heap.
  virtual std::unique_ptr<Heap> open(int worker) = 0;
  // Parent: bytes allocated in the heap as the parent sees it, -1 if the
  // family cannot tell.
  virtual int64_t used_bytes() = 0;
  // Parent, at the end (also after a failure): deletes the backing store.
  virtual void remove() = 0;
  virtual int max_workers() const { return 64; }
};

struct FamilyInfo {
  std::string name;
  std::string summary;
  std::unique_ptr<Family> (*make)(const Config&);
};

std::vector<FamilyInfo>& registry();

struct Registration {
  explicit Registration(FamilyInfo info) { registry().push_back(std::move(info)); }
};

// Prints "bench_shared_heap: <what>" (and errno's text if `with_errno`) and
// exits with status 1.
[[noreturn]] void fail(const std::string& what, bool with_errno = false);

}  // namespace shb
