// Process-local baselines, not shared heaps. "none-private" gives every ring
// slot a fixed buffer of --max-size bytes in the worker's own (private, not
// shared) memory, so alloc and free cost nothing and the processes share
// nothing: with --procs 2 it shows what two processes of this very loop get
// out of the machine's CPUs when no heap is involved at all.
// "malloc-private" is the process's own malloc and free (glibc, or whatever
// LD_PRELOAD puts in, e.g. mimalloc): the private heap a shared one is held
// against. The loop, the clock and the driver are the same as for the real
// families.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "shared_heap.h"

namespace shb {
namespace {

class PrivateHeap final : public Heap {
 public:
  PrivateHeap(uint32_t slots, uint32_t max_size, uint64_t token)
      : buffer_(static_cast<size_t>(slots) * max_size), max_size_(max_size), token_(token) {}
  void* alloc(uint32_t slot, size_t) override { return buffer_.data() + static_cast<size_t>(slot) * max_size_; }
  void free(uint32_t, void*) override {}
  uint64_t offset(const void* p) const override {
    return static_cast<uint64_t>(static_cast<const unsigned char*>(p) - buffer_.data());
  }
  uint64_t token() const override { return token_; }

 private:
  std::vector<unsigned char> buffer_;
  uint32_t max_size_;
  uint64_t token_;
};

class PrivateFamily final : public Family {
 public:
  explicit PrivateFamily(const Config& c) : config_(c) {}
  void create(uint64_t token) override { token_ = token; }
  std::unique_ptr<Heap> open(int) override {
    return std::make_unique<PrivateHeap>(config_.slots, config_.max_size, token_);
  }
  int64_t used_bytes() override { return -1; }  // nothing is shared: shared_check says unknown
  void remove() override {}

 private:
  Config config_;
  uint64_t token_ = 0;
};

class MallocHeap final : public Heap {
 public:
  explicit MallocHeap(uint64_t token) : token_(token) {}
  void* alloc(uint32_t, size_t size) override { return std::malloc(size); }
  void free(uint32_t, void* p) override { std::free(p); }
  // Addresses, not offsets: a private heap has no common base.
  uint64_t offset(const void* p) const override { return reinterpret_cast<uintptr_t>(p); }
  uint64_t token() const override { return token_; }

 private:
  uint64_t token_;
};

class MallocFamily final : public Family {
 public:
  void create(uint64_t token) override { token_ = token; }
  std::unique_ptr<Heap> open(int) override { return std::make_unique<MallocHeap>(token_); }
  int64_t used_bytes() override { return -1; }
  void remove() override {}

 private:
  uint64_t token_ = 0;
};

const Registration malloc_private{{"malloc-private",
                                   "baseline: the process's own malloc/free (LD_PRELOAD picks it), nothing shared",
                                   [](const Config&) -> std::unique_ptr<Family> {
                                     return std::make_unique<MallocFamily>();
                                   }}};

const Registration none_private{{"none-private",
                                 "control: no allocator, a fixed private buffer per slot, nothing shared",
                                 [](const Config& c) -> std::unique_ptr<Family> {
                                   return std::make_unique<PrivateFamily>(c);
                                 }}};

}  // namespace
}  // namespace shb
