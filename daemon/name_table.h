// Strings kept once however often they are used, named by a small index:
// function names of sampled stacks, region names of samples. A name stays
// while something uses it; the table knows what its names cost, so that a
// budget of bytes can hold it.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace memd::daemon {

class NameTable {
 public:
  using Id = uint32_t;
  static constexpr Id kNone = 0;  // no name (an empty string)

  // One more use of `name` (stored if new). REQUIRES: a use is released once.
  Id acquire(std::string_view name);
  void retain(Id id) {  // one more use of a name held
    if (id != kNone) ++entries_[id].uses;
  }
  void release(Id id);
  std::optional<Id> find(std::string_view name) const;
  const std::string& name(Id id) const { return entries_[id].name; }

  // Bytes the names take, as the heap holds them (entries, index).
  uint64_t bytes() const { return bytes_; }
  // What storing `name` anew costs.
  static uint64_t cost(std::string_view name);

 private:
  struct Entry {
    std::string name;
    uint64_t uses = 0;  // 0: a free slot
  };
  std::deque<Entry> entries_{Entry{}};  // by Id; a deque: index_ views names in place
  std::vector<Id> free_;
  std::unordered_map<std::string_view, Id> index_;
  uint64_t bytes_ = 0;
};

}  // namespace memd::daemon
