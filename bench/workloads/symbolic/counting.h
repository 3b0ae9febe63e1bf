// Containers for the symbolic workload that count the bytes they request.
//
// The workload reports its exact peak live bytes, and std containers hide
// their allocations. A minimal allocator that forwards to ::operator new
// (and so to whatever malloc is preloaded) while keeping the tally makes the
// count exact without replacing the global operator new — which would change
// the very code path under test.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "../common.h"

namespace sym {

// Single-threaded workload: one plain global tally.
inline wl::LiveBytes& live_bytes() {
  static wl::LiveBytes tally;
  return tally;
}

template <class T>
struct Counting {
  using value_type = T;

  Counting() = default;
  template <class U>
  Counting(const Counting<U>&) {}

  T* allocate(size_t n) {
    live_bytes().add(n * sizeof(T));
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  // Sized delete, like std::allocator: allocators that use the size hint
  // should see it here too.
  void deallocate(T* p, size_t n) {
    live_bytes().sub(n * sizeof(T));
    ::operator delete(p, n * sizeof(T));
  }

  friend bool operator==(const Counting&, const Counting&) { return true; }
};

using Str = std::basic_string<char, std::char_traits<char>, Counting<char>>;
template <class T>
using Vec = std::vector<T, Counting<T>>;
template <class K, class V>
using Map = std::map<K, V, std::less<K>, Counting<std::pair<const K, V>>>;

}  // namespace sym
