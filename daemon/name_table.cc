#include "daemon/name_table.h"

namespace memd::daemon {
namespace {
// An entry, its slot of the index (node and bucket) and a string's heap
// block header: what a name costs beyond its characters.
constexpr uint64_t kEntryBytes = sizeof(std::string) + 8 + 64;
constexpr size_t kInlineChars = 15;  // libstdc++ keeps shorter strings in the object
}  // namespace

uint64_t NameTable::cost(std::string_view name) {
  return kEntryBytes + (name.size() > kInlineChars ? name.size() + 1 : 0);
}

NameTable::Id NameTable::acquire(std::string_view name) {
  if (name.empty()) return kNone;
  if (auto it = index_.find(name); it != index_.end()) {
    ++entries_[it->second].uses;
    return it->second;
  }
  Id id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    id = static_cast<Id>(entries_.size());
    entries_.emplace_back();
  }
  Entry& e = entries_[id];
  e.name.assign(name);
  e.uses = 1;
  index_.emplace(e.name, id);
  bytes_ += cost(name);
  return id;
}

void NameTable::release(Id id) {
  if (id == kNone) return;
  Entry& e = entries_[id];
  if (--e.uses > 0) return;
  bytes_ -= cost(e.name);
  index_.erase(e.name);
  std::string().swap(e.name);
  free_.push_back(id);
}

std::optional<NameTable::Id> NameTable::find(std::string_view name) const {
  if (name.empty()) return kNone;
  auto it = index_.find(name);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

}  // namespace memd::daemon
