// PMDK libpmemobj peers: a persistent heap in a pool file, one process.
//
// The worker's ring of objects lives in the pool's root object, as it would
// in a real program: an allocation is only crash-safe if the handle that
// names it is stored in the pool, atomically with the allocation.
//   pmemobj-atomic  pmemobj_alloc / pmemobj_free with the ring slot as the
//                   destination: the allocator's metadata and the slot are
//                   made durable before the call returns.
//   pmemobj-tx      one transaction per pair: snapshot the slot, tx_free the
//                   old object, tx_alloc the new one, commit.
// Whether "durable" means cache flushes or msync is libpmem's choice: on a
// file system without DAX it msyncs, unless PMEM_IS_PMEM_FORCE=1 makes it
// treat the mapping as persistent memory (flushes only). The runner sets
// that variable per case. The bytes the loop writes into each object are not
// flushed, as with every other allocator.
#include <libpmemobj.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "shared_heap.h"

namespace shb {
namespace {

constexpr const char* kLayout = "memd-bench";
constexpr uint64_t kTypeNum = 1;

// The root object: this header, then `slots` PMEMoids.
struct Root {
  uint64_t token;
  uint64_t slots;
  PMEMoid* ring() { return reinterpret_cast<PMEMoid*>(this + 1); }
};

size_t root_size(uint32_t slots) { return sizeof(Root) + slots * sizeof(PMEMoid); }

class PmemHeap final : public Heap {
 public:
  PmemHeap(PMEMobjpool* pop, Root* root, bool tx) : pop_(pop), root_(root), tx_(tx) {}
  ~PmemHeap() override { pmemobj_close(pop_); }

  void* alloc(uint32_t slot, size_t size) override {
    if (filling_) {
      actions_.emplace_back();
      root_->ring()[slot] = pmemobj_reserve(pop_, &actions_.back(), size, kTypeNum);
      return pmemobj_direct(root_->ring()[slot]);
    }
    if (tx_) {
      void* p = nullptr;
      transaction([&] {
        pmemobj_tx_add_range_direct(&root_->ring()[slot], sizeof(PMEMoid));
        root_->ring()[slot] = pmemobj_tx_alloc(size, kTypeNum);
        p = pmemobj_direct(root_->ring()[slot]);
      });
      return p;
    }
    if (pmemobj_alloc(pop_, &root_->ring()[slot], size, kTypeNum, nullptr, nullptr) != 0) return nullptr;
    return pmemobj_direct(root_->ring()[slot]);
  }

  void free(uint32_t slot, void*) override {
    if (tx_) {
      transaction([&] {
        pmemobj_tx_add_range_direct(&root_->ring()[slot], sizeof(PMEMoid));
        pmemobj_tx_free(root_->ring()[slot]);
        root_->ring()[slot] = OID_NULL;
      });
      return;
    }
    pmemobj_free(&root_->ring()[slot]);
  }

  void* replace(uint32_t slot, void* old, size_t size) override {
    if (!tx_) return Heap::replace(slot, old, size);
    void* p = nullptr;
    transaction([&] {
      pmemobj_tx_add_range_direct(&root_->ring()[slot], sizeof(PMEMoid));
      pmemobj_tx_free(root_->ring()[slot]);
      root_->ring()[slot] = pmemobj_tx_alloc(size, kTypeNum);
      p = pmemobj_direct(root_->ring()[slot]);
    });
    return p;
  }

  // The live set is reserved object by object and published at once (the
  // action API: one redo log for all), so filling it costs a few msyncs
  // instead of several per object. Only the timed loop uses the API under test.
  void fill_begin() override { filling_ = true; }
  void fill_end() override {
    filling_ = false;
    if (pmemobj_publish(pop_, actions_.data(), actions_.size()) != 0)
      fail(std::string("pmemobj_publish: ") + pmemobj_errormsg());
    pmemobj_persist(pop_, root_->ring(), root_->slots * sizeof(PMEMoid));
    actions_.clear();
    actions_.shrink_to_fit();
  }

  uint64_t offset(const void* p) const override {
    return static_cast<uint64_t>(static_cast<const char*>(p) - reinterpret_cast<const char*>(pop_));
  }
  uint64_t token() const override { return root_->token; }

 private:
  // Without a jmp_buf, a failing call inside aborts the transaction and the
  // remaining calls return errors; pmemobj_tx_end then reports it.
  template <class Body>
  void transaction(Body body) {
    if (pmemobj_tx_begin(pop_, nullptr, TX_PARAM_NONE) != 0) fail(std::string("pmemobj_tx_begin: ") + pmemobj_errormsg());
    body();
    if (pmemobj_tx_stage() == TX_STAGE_WORK) pmemobj_tx_commit();
    if (pmemobj_tx_end() != 0) fail(std::string("transaction aborted: ") + pmemobj_errormsg());
  }

  PMEMobjpool* pop_;
  Root* root_;
  bool tx_;
  bool filling_ = false;
  std::vector<pobj_action> actions_;  // reservations of the fill
};

class PmemFamily final : public Family {
 public:
  PmemFamily(const Config& c, bool tx) : path_(c.dir + "/" + c.stem + ".pmemobj"), config_(c), tx_(tx) {}

  void create(uint64_t token) override {
    ::unlink(path_.c_str());  // a leftover of a killed run with the same pid
    PMEMobjpool* pop = pmemobj_create(path_.c_str(), kLayout, config_.heap_bytes, 0600);
    if (pop == nullptr) fail("pmemobj_create " + path_ + ": " + pmemobj_errormsg());
    PMEMoid root_oid = pmemobj_root(pop, root_size(config_.slots));
    if (OID_IS_NULL(root_oid)) fail(std::string("pmemobj_root: ") + pmemobj_errormsg());
    auto* root = static_cast<Root*>(pmemobj_direct(root_oid));
    root->token = token;
    root->slots = config_.slots;
    pmemobj_persist(pop, root, sizeof(Root));
    pmemobj_close(pop);  // the worker opens it; a pool is open in one process at a time
  }

  std::unique_ptr<Heap> open(int) override {
    PMEMobjpool* pop = pmemobj_open(path_.c_str(), kLayout);
    if (pop == nullptr) fail("pmemobj_open " + path_ + ": " + pmemobj_errormsg());
    auto* root = static_cast<Root*>(pmemobj_direct(pmemobj_root(pop, root_size(config_.slots))));
    if (root == nullptr || root->slots != config_.slots) fail("pool root has an unexpected shape");
    return std::make_unique<PmemHeap>(pop, root, tx_);
  }

  // Opens the pool (closed between the runs of the workers) and adds up the
  // usable sizes of its objects: after the worker quit, its live set must be
  // there, in the file.
  int64_t used_bytes() override {
    PMEMobjpool* pop = pmemobj_open(path_.c_str(), kLayout);
    if (pop == nullptr) return -1;
    int64_t used = 0;
    for (PMEMoid oid = pmemobj_first(pop); !OID_IS_NULL(oid); oid = pmemobj_next(oid))
      used += static_cast<int64_t>(pmemobj_alloc_usable_size(oid));
    pmemobj_close(pop);
    return used;
  }
  void remove() override { ::unlink(path_.c_str()); }
  int max_workers() const override { return 1; }

 private:
  std::string path_;
  Config config_;
  bool tx_;
};

const Registration atomic_api{{"pmemobj-atomic", "PMDK libpmemobj pmemobj_alloc/pmemobj_free (atomic API)",
                               [](const Config& c) -> std::unique_ptr<Family> {
                                 return std::make_unique<PmemFamily>(c, false);
                               }}};
const Registration tx_api{{"pmemobj-tx", "PMDK libpmemobj pmemobj_tx_alloc/pmemobj_tx_free, one pair per transaction",
                           [](const Config& c) -> std::unique_ptr<Family> {
                             return std::make_unique<PmemFamily>(c, true);
                           }}};

}  // namespace
}  // namespace shb
