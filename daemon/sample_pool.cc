#include "daemon/sample_pool.h"

#include <algorithm>

namespace memd::daemon {

// A sample's block and its heap header, its slot in the deque and a node of
// live_, and its stack's block.
uint64_t SamplePool::cost(size_t frames) {
  return sizeof(Sample) + 16 + 8 + 64 + (frames > 0 ? frames * sizeof(Frame) + 16 : 0);
}

SamplePool::~SamplePool() {
  if (shared_ != nullptr) shared_->bytes -= charged_;
}

SamplePool::Stored SamplePool::room_for(uint64_t more) const {
  if (bytes() + more > max_bytes_) return Stored::kOverBytes;
  // charged_ is of this pool's bytes what the shared count holds already.
  if (shared_ != nullptr && shared_->bytes - charged_ + bytes() + more > shared_->max_bytes) {
    return Stored::kOverSharedBytes;
  }
  return Stored::kYes;
}

void SamplePool::settle() {
  if (shared_ == nullptr) return;
  shared_->bytes = shared_->bytes - charged_ + bytes();
  charged_ = bytes();
}

SamplePool::Stored SamplePool::add_symbol(uint64_t address, std::string_view name, size_t max_symbols) {
  Settle settle{this};
  auto it = symbols_.find(address);
  if (it != symbols_.end() && names_.name(it->second) == name) return Stored::kYes;
  if (it == symbols_.end() && symbols_.size() >= max_symbols) return Stored::kOverCount;
  uint64_t need = (it == symbols_.end() ? kSymbolBytes : 0) + (names_.find(name) ? 0 : NameTable::cost(name));
  if (Stored room = room_for(need); room != Stored::kYes) return room;
  NameTable::Id id = names_.acquire(name);
  if (it != symbols_.end()) {
    names_.release(it->second);  // samples taken before keep their uses of the old name
    it->second = id;
  } else {
    symbols_.emplace(address, id);
  }
  return Stored::kYes;
}

SamplePool::Stored SamplePool::add(std::string_view heap, const Sample& fields, std::span<const uint64_t> stack) {
  Settle settle{this};
  const uint64_t need = cost(stack.size()) + (names_.find(heap) ? 0 : NameTable::cost(heap));
  if (!fits(need)) {
    // Freed samples only count in alloc_*: they go before a live one is refused.
    if (freed_ > 0) remove_if([](const Sample& s) { return !s.live; });
    if (Stored room = room_for(need); room != Stored::kYes) return room;
  }
  auto s = std::make_unique<Sample>();
  s->heap = names_.acquire(heap);
  s->pid = fields.pid;
  s->uid = fields.uid;
  s->session = fields.session;
  s->address = fields.address;
  s->requested = fields.requested;
  s->period = fields.period;
  s->stack.reserve(stack.size());
  for (uint64_t pc : stack) {
    auto sym = symbols_.find(pc);
    NameTable::Id function = sym != symbols_.end() ? sym->second : NameTable::kNone;
    names_.retain(function);
    s->stack.push_back({pc, function});
  }
  push(std::move(s));
  if (samples_.size() > max_samples_) {
    // Down to 3/4 of the bound: a pass over the samples once in a quarter
    // of the bound's arrivals, not once per sample.
    if (freed_ > 0) remove_if([](const Sample& x) { return !x.live; });
    while (samples_.size() > max_samples_ * 3 / 4) drop_oldest();
  }
  return Stored::kYes;
}

size_t SamplePool::keep(const SamplePool& from, const Sample& s) {
  Settle settle{this};
  auto need = [&] {
    uint64_t n = cost(s.stack.size()) + (names_.find(from.name(s.heap)) ? 0 : NameTable::cost(from.name(s.heap)));
    for (const Frame& f : s.stack) {
      if (!names_.find(from.name(f.function))) n += NameTable::cost(from.name(f.function));
    }
    return n;
  };
  size_t went = 0;
  while (!samples_.empty() && (samples_.size() >= max_samples_ || !fits(need()))) {
    drop_oldest();
    ++went;
  }
  if (!fits(need())) return went + 1;  // alone it is over the budget
  auto copy = std::make_unique<Sample>();
  copy->heap = names_.acquire(from.name(s.heap));
  copy->live = s.live;
  copy->pid = s.pid;
  copy->uid = s.uid;
  copy->session = s.session;
  copy->address = s.address;
  copy->requested = s.requested;
  copy->period = s.period;
  copy->stack.reserve(s.stack.size());
  for (const Frame& f : s.stack) copy->stack.push_back({f.address, names_.acquire(from.name(f.function))});
  push(std::move(copy));
  return went;
}

bool SamplePool::end(std::string_view heap, uint64_t address) {
  std::optional<NameTable::Id> id = names_.find(heap);
  if (!id) return false;
  auto it = live_.find({*id, address});
  if (it == live_.end()) return false;
  mark_freed(*it->second);
  live_.erase(it);
  return true;
}

void SamplePool::forget_heap(std::string_view heap) {
  Settle settle{this};
  std::optional<NameTable::Id> id = names_.find(heap);
  if (id) remove_if([&](const Sample& s) { return s.heap == *id; });
}

void SamplePool::push(std::unique_ptr<Sample> s) {
  if (s->live) {
    Sample*& slot = live_[{s->heap, s->address}];
    if (slot != nullptr) mark_freed(*slot);  // its free went unseen: the address was reused
    slot = s.get();
  }
  if (!s->live) ++freed_;
  sample_bytes_ += cost(s->stack.size());
  samples_.push_back(std::move(s));
}

template <class Pred>
size_t SamplePool::remove_if(Pred pred) {
  return std::erase_if(samples_, [&](const std::unique_ptr<Sample>& s) {
    if (!pred(*s)) return false;
    release(*s);
    return true;
  });
}

void SamplePool::drop_oldest() {
  release(*samples_.front());
  samples_.pop_front();
}

void SamplePool::release(const Sample& s) {
  if (s.live) {
    auto it = live_.find({s.heap, s.address});
    if (it != live_.end() && it->second == &s) live_.erase(it);
  } else {
    --freed_;
  }
  names_.release(s.heap);
  for (const Frame& f : s.stack) names_.release(f.function);
  sample_bytes_ -= cost(s.stack.size());
}

}  // namespace memd::daemon
