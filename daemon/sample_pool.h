// Sampled allocations in a budget of bytes: those of one client session
// (with the names it gave its return addresses), or those one region kept
// of sessions that ended. A frame is a return address and the index of its
// function's name; each name is stored once per pool and each sample holds
// uses of its names, so the pool's bytes are what it holds, and all of it
// goes with the pool. A pool may also draw on a budget it shares with other
// pools (those of one user's sessions): what it holds counts against that
// too, from when it is stored until the pool lets it go or is destroyed.
// Not thread-safe: the telemetry store's lock guards it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "daemon/name_table.h"

namespace memd::daemon {

// Bytes several pools draw on together.
struct SharedBudget {
  uint64_t max_bytes = 0;
  uint64_t bytes = 0;  // the sum of its pools' bytes(): each pool keeps it so
};

class SamplePool {
 public:
  struct Frame {
    uint64_t address = 0;
    NameTable::Id function = NameTable::kNone;  // kNone: the client did not name it
  };
  struct Sample {
    NameTable::Id heap = NameTable::kNone;  // a region's name, or the process heap's label
    bool live = true;                        // no free of it reported (yet)
    pid_t pid = 0;
    uint32_t uid = 0;
    uint64_t session = 0;
    uint64_t address = 0;  // in the process heap; offset in a region
    uint64_t requested = 0;
    uint64_t period = 0;   // the client's sampling period when it was taken
    std::vector<Frame> stack;  // innermost first
  };

  // REQUIRES: max_samples > 0; `shared` (if any) outlives the pool.
  SamplePool(uint64_t max_bytes, size_t max_samples, SharedBudget* shared = nullptr)
      : max_bytes_(max_bytes), max_samples_(max_samples), shared_(shared) {}
  ~SamplePool();  // gives its bytes back to the shared budget
  SamplePool(const SamplePool&) = delete;
  SamplePool& operator=(const SamplePool&) = delete;

  // What became of something offered to the pool: stored, or not, past
  // which bound (the pool's own budget is named before the shared one).
  enum class Stored { kYes, kOverCount, kOverBytes, kOverSharedBytes };
  // Session pools: the name of a return address, for the samples that
  // follow. Not stored past `max_symbols` names or a budget.
  Stored add_symbol(uint64_t address, std::string_view name, size_t max_symbols);
  // A new sample in `heap`, its frames named by add_symbol; `fields` gives
  // the rest. Past max_samples the oldest go (freed ones first); past a
  // budget freed ones go, and if that is not enough the new one is not
  // stored.
  Stored add(std::string_view heap, const Sample& fields, std::span<const uint64_t> stack);
  // A sample of `from` (its session ended) kept here, names copied: the
  // oldest samples here go to make room. Returns how many went.
  size_t keep(const SamplePool& from, const Sample& s);
  // The free of a sampled object: ends the live sample at (heap, address), if any.
  bool end(std::string_view heap, uint64_t address);
  // A region was removed: its samples go.
  void forget_heap(std::string_view heap);

  const std::deque<std::unique_ptr<Sample>>& samples() const { return samples_; }
  const std::string& name(NameTable::Id id) const { return names_.name(id); }
  // The name add_symbol gave `address`; nullptr if none.
  const std::string* symbol(uint64_t address) const {
    auto it = symbols_.find(address);
    return it != symbols_.end() ? &names_.name(it->second) : nullptr;
  }
  std::optional<NameTable::Id> find_name(std::string_view name) const { return names_.find(name); }
  uint64_t bytes() const { return names_.bytes() + symbols_.size() * kSymbolBytes + sample_bytes_; }

 private:
  // A symbol's slot of the map (node, bucket): its name is in names_.
  static constexpr uint64_t kSymbolBytes = 48;
  static uint64_t cost(size_t frames);

  void push(std::unique_ptr<Sample> s);
  template <class Pred>
  size_t remove_if(Pred pred);
  void drop_oldest();
  void mark_freed(Sample& s) {
    s.live = false;
    ++freed_;
  }
  void release(const Sample& s);
  // Whether `more` bytes fit in both budgets: kYes, or the one they do not.
  Stored room_for(uint64_t more) const;
  bool fits(uint64_t more) const { return room_for(more) == Stored::kYes; }
  // Brings the shared budget's count up to date with bytes(); every public
  // method that changes the pool ends with it (the Settle guard).
  void settle();
  struct Settle {
    SamplePool* pool;
    ~Settle() { pool->settle(); }
  };

  const uint64_t max_bytes_;
  const size_t max_samples_;
  SharedBudget* const shared_;  // null: none
  uint64_t charged_ = 0;        // of bytes(), what shared_->bytes counts now
  NameTable names_;
  std::unordered_map<uint64_t, NameTable::Id> symbols_;
  std::deque<std::unique_ptr<Sample>> samples_;  // oldest first
  std::map<std::pair<NameTable::Id, uint64_t>, Sample*> live_;  // live samples by (heap, address)
  uint64_t sample_bytes_ = 0;
  // Samples not live: a pass to remove them is made only when there are
  // some (a client over its budget must not make every sample a pass).
  size_t freed_ = 0;
};

}  // namespace memd::daemon
