// memd::Region (region/region.h, library `memd`) as one more family of
// bench_shared_heap (see shared_heap.h).
//
//   memd-shm   Discipline::kShm   (a POSIX shared memory object)
//   memd-file  Discipline::kFile  (a mapped file in --dir)
//   memd-pmem  Discipline::kPmem  (a file in --dir mapped through libpmem)
//
// shared_small: the parent creates the region as its owner and serves leases
// on a Unix socket in --dir; every worker (forked after that) attaches as a
// client through that socket and allocates from its own leased blocks.
// persistent_small: the parent creates the region and closes it; the single
// worker opens it as its owner, as a program using a persistent heap alone
// would.
//
// In shared_small the workers are forked from the owner; each maps the
// region over the mapping it inherited, at the same address (the owner
// handle it inherited stays unused). Only offsets are compared across
// processes.
//
// Nothing is made durable on the allocation path: no Region::persist or
// checkpoint. Closing the region (after the timed loop) persists it whole.
#include <unistd.h>

#include <algorithm>
#include <string>

#include "region/region.h"
#include "shared_heap.h"

namespace shb {
namespace {

constexpr const char* kTokenRoot = "memd_bench_token";

class MemdHeap final : public Heap {
 public:
  explicit MemdHeap(std::unique_ptr<memd::Region> region) : region_(std::move(region)) {}
  void* alloc(uint32_t, size_t size) override { return region_->alloc(size); }
  void free(uint32_t, void* p) override { region_->free(p); }
  uint64_t offset(const void* p) const override { return region_->offset_of(p); }
  uint64_t token() const override {
    const uint64_t* t = region_->find<uint64_t>(kTokenRoot);
    return t != nullptr ? *t : 0;
  }

 private:
  std::unique_ptr<memd::Region> region_;
};

class MemdFamily final : public Family {
 public:
  MemdFamily(const Config& c, memd::Discipline d)
      : discipline_(d),
        name_(d == memd::Discipline::kShm ? c.stem : c.dir + "/" + c.stem + ".region"),
        socket_(c.dir + "/" + c.stem + ".sock"),
        config_(c),
        clients_(c.workload == "shared_small") {}

  void create(uint64_t token) override {
    (void)memd::Region::remove(name_, discipline_);  // a leftover of a killed run with the same pid
    memd::RegionOptions options;
    options.discipline = discipline_;
    options.max_bytes = config_.heap_bytes;
    options.max_clients = static_cast<uint32_t>(std::max(64, config_.workers + 1));
    auto created = memd::Region::create(name_, options);
    if (!created.ok()) fail("Region::create " + name_ + ": " + created.status().ToString());
    owner_ = std::move(created).value();
    uint64_t* t = owner_->find_or_construct<uint64_t>(kTokenRoot, token);
    if (t == nullptr) fail("Region::find_or_construct of the token root failed");
    if (clients_) {
      ::unlink(socket_.c_str());
      absl::Status served = owner_->serve(socket_);
      if (!served.ok()) fail("Region::serve " + socket_ + ": " + served.ToString());
    } else {
      owner_.reset();  // clean close; the worker reopens it as the owner
    }
  }

  std::unique_ptr<Heap> open(int) override {
    auto region = clients_ ? memd::Region::attach(name_, discipline_, socket_) : memd::Region::open(name_, discipline_);
    if (!region.ok()) fail((clients_ ? "Region::attach " : "Region::open ") + name_ + ": " + region.status().ToString());
    return std::make_unique<MemdHeap>(std::move(region).value());
  }

  // Usable bytes of live objects, as the owner sees the region.
  int64_t used_bytes() override {
    if (owner_) return static_cast<int64_t>(owner_->stat().busy_bytes);
    auto region = memd::Region::open(name_, discipline_);  // persistent_small: the worker has closed it
    if (!region.ok()) return -1;
    return static_cast<int64_t>((*region)->stat().busy_bytes);
  }

  void remove() override {
    owner_.reset();
    (void)memd::Region::remove(name_, discipline_);
    ::unlink(socket_.c_str());
  }

 private:
  memd::Discipline discipline_;
  std::string name_;
  std::string socket_;
  Config config_;
  bool clients_;  // workers attach through the owner's socket (else: the worker is the owner)
  std::unique_ptr<memd::Region> owner_;
};

template <memd::Discipline kDiscipline>
std::unique_ptr<Family> make(const Config& c) {
  return std::make_unique<MemdFamily>(c, kDiscipline);
}

const Registration shm{{"memd-shm", "memd::Region, Discipline::kShm", make<memd::Discipline::kShm>}};
const Registration file{{"memd-file", "memd::Region, Discipline::kFile", make<memd::Discipline::kFile>}};
const Registration pmem{{"memd-pmem", "memd::Region, Discipline::kPmem", make<memd::Discipline::kPmem>}};

}  // namespace
}  // namespace shb
