// Boost.Interprocess peers: a managed segment (POSIX shared memory object or
// mapped file) whose segment manager (rbtree_best_fit under a process-shared
// mutex) every process uses through allocate/deallocate. No durability: a
// mapped file is written back whenever the kernel chooses.
#include <boost/interprocess/managed_mapped_file.hpp>
#include <boost/interprocess/managed_shared_memory.hpp>
#include <boost/interprocess/shared_memory_object.hpp>

#include <new>

#include "shared_heap.h"

namespace shb {
namespace {

namespace bip = boost::interprocess;

constexpr const char* kTokenName = "memd_bench_token";

template <class Segment>
class BoostHeap final : public Heap {
 public:
  explicit BoostHeap(std::unique_ptr<Segment> segment) : segment_(std::move(segment)) {}
  void* alloc(uint32_t, size_t size) override { return segment_->allocate(size, std::nothrow); }
  void free(uint32_t, void* p) override { segment_->deallocate(p); }
  uint64_t offset(const void* p) const override {
    return static_cast<uint64_t>(static_cast<const char*>(p) - static_cast<const char*>(segment_->get_address()));
  }
  uint64_t token() const override {
    auto found = segment_->template find<uint64_t>(kTokenName);
    return found.first != nullptr ? *found.first : 0;
  }

 private:
  std::unique_ptr<Segment> segment_;
};

// Segment: bip::managed_shared_memory or bip::managed_mapped_file.
template <class Segment, bool kIsFile>
class BoostFamily final : public Family {
 public:
  explicit BoostFamily(const Config& c)
      : name_(kIsFile ? c.dir + "/" + c.stem + ".boost" : c.stem), bytes_(c.heap_bytes) {}

  void create(uint64_t token) override {
    remove_backing();  // a leftover of a killed run with the same pid
    try {
      segment_ = std::make_unique<Segment>(bip::create_only, name_.c_str(), bytes_);
      *segment_->template construct<uint64_t>(kTokenName)() = token;
    } catch (const std::exception& e) {
      fail("creating " + name_ + ": " + e.what());
    }
  }

  std::unique_ptr<Heap> open(int) override {
    try {
      return std::make_unique<BoostHeap<Segment>>(std::make_unique<Segment>(bip::open_only, name_.c_str()));
    } catch (const std::exception& e) {
      fail("opening " + name_ + ": " + e.what());
    }
  }

  int64_t used_bytes() override {
    return segment_ ? static_cast<int64_t>(segment_->get_size() - segment_->get_free_memory()) : -1;
  }

  void remove() override {
    segment_.reset();
    remove_backing();
  }

 private:
  void remove_backing() {
    if constexpr (kIsFile) {
      bip::file_mapping::remove(name_.c_str());
    } else {
      bip::shared_memory_object::remove(name_.c_str());
    }
  }

  std::string name_;
  size_t bytes_;
  std::unique_ptr<Segment> segment_;
};

const Registration shm{{"boost-shm", "Boost.Interprocess managed_shared_memory (POSIX shm object)",
                        [](const Config& c) -> std::unique_ptr<Family> {
                          return std::make_unique<BoostFamily<bip::managed_shared_memory, false>>(c);
                        }}};
const Registration file{{"boost-file", "Boost.Interprocess managed_mapped_file (no durability)",
                         [](const Config& c) -> std::unique_ptr<Family> {
                           return std::make_unique<BoostFamily<bip::managed_mapped_file, true>>(c);
                         }}};

}  // namespace
}  // namespace shb
