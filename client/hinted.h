// Hinted containers (the TP/Medius allocation hints for the standard
// library). libstdc++'s node containers never pass allocate() a hint, so
// the hint travels beside the call: HintedAllocator reads it from a small
// state its copies and rebinds share, and memd::hinted_list sets it to
// the element a new node will follow before each insertion; hinted_set and
// hinted_map set it to the new key's neighbour in key order; hinted_deque
// to the end element a new chunk continues. The node then
// lands near that element when the element's block has room
// (Heap::alloc_near, within a page), and a walk in order touches fewer
// pages. A hint is advice: a stale one (its element erased) costs a look,
// never correctness.
#pragma once

#include <atomic>
#include <concepts>
#include <cstddef>
#include <deque>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <list>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <tuple>
#include <utility>

#include "client/heap.h"

namespace memd {

struct HintState {
  explicit HintState(Heap& h) : heap(&h) {}
  Heap* heap;
  // The address the next allocation should land near; nullptr: none.
  // Atomic only so that containers on several threads sharing one state
  // cannot tear it: a hint is advice either way.
  std::atomic<const void*> next{nullptr};
};

template <class T>
class HintedAllocator {
 public:
  using value_type = T;
  explicit HintedAllocator(Heap& heap) : state_(std::make_shared<HintState>(heap)) {}
  template <class U>
  HintedAllocator(const HintedAllocator<U>& other) noexcept : state_(other.state()) {}

  T* allocate(size_t n) {
    if (n > std::numeric_limits<size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
    const void* hint = state_->next.load(std::memory_order_relaxed);
    void* p = hint != nullptr && alignof(T) <= 8 ? state_->heap->alloc_near(n * sizeof(T), hint)
                                                 : state_->heap->alloc_aligned(n * sizeof(T), alignof(T));
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) noexcept { state_->heap->free(p); }
  // The next allocation's hint (nullptr: none).
  void hint(const void* near) const noexcept { state_->next.store(near, std::memory_order_relaxed); }
  const std::shared_ptr<HintState>& state() const noexcept { return state_; }

  template <class U>
  bool operator==(const HintedAllocator<U>& o) const noexcept {
    return state_->heap == o.state()->heap;
  }

 private:
  std::shared_ptr<HintState> state_;
};

// std::list whose insertions hint the node they follow (push_back: the
// last element; insert(pos): the element before pos; push_front: the
// first). Every standard insert overload is here and hints; operations
// that allocate inside std::list itself (resize, assign, the range
// constructors) pass no fresh hint: they may reuse the last one, which is
// advice only. Everything else is std::list's.
template <class T>
class hinted_list : public std::list<T, HintedAllocator<T>> {
  using base = std::list<T, HintedAllocator<T>>;

 public:
  using typename base::const_iterator;
  using typename base::iterator;
  using typename base::size_type;
  explicit hinted_list(Heap& heap) : base(HintedAllocator<T>(heap)) {}

  template <class... Args>
  iterator emplace(const_iterator pos, Args&&... args) {
    hint_before(pos);
    return base::emplace(pos, std::forward<Args>(args)...);
  }
  iterator insert(const_iterator pos, const T& v) { return emplace(pos, v); }
  iterator insert(const_iterator pos, T&& v) { return emplace(pos, std::move(v)); }
  iterator insert(const_iterator pos, size_type n, const T& v) {
    iterator first = this->erase(pos, pos);  // pos, mutable: the answer when n is 0
    for (size_type i = 0; i < n; ++i) {
      iterator it = emplace(pos, v);
      if (i == 0) first = it;
    }
    return first;
  }
  template <class It>
    requires std::derived_from<typename std::iterator_traits<It>::iterator_category, std::input_iterator_tag>
  iterator insert(const_iterator pos, It from, It to) {
    iterator first = this->erase(pos, pos);
    for (bool any = false; from != to; ++from, any = true) {
      iterator it = emplace(pos, *from);
      if (!any) first = it;
    }
    return first;
  }
  iterator insert(const_iterator pos, std::initializer_list<T> values) {
    return insert(pos, values.begin(), values.end());
  }
  template <class... Args>
  T& emplace_back(Args&&... args) {
    return *emplace(this->cend(), std::forward<Args>(args)...);
  }
  template <class... Args>
  T& emplace_front(Args&&... args) {
    return *emplace(this->cbegin(), std::forward<Args>(args)...);
  }
  void push_back(const T& v) { emplace_back(v); }
  void push_back(T&& v) { emplace_back(std::move(v)); }
  void push_front(const T& v) { emplace_front(v); }
  void push_front(T&& v) { emplace_front(std::move(v)); }

 private:
  // The element the new node will sit by: the one before pos, else the
  // one at pos (an insertion at the front).
  void hint_before(const_iterator pos) {
    const void* near = nullptr;
    if (pos != this->cbegin()) near = &*std::prev(pos);
    else if (pos != this->cend()) near = &*pos;
    this->get_allocator().hint(near);
  }
};

// The element a new key of `tree` (a std::set or std::map) sits by in
// order: the first not less than it, else the last. Returned with the
// position to insert at (std::set/map's insertion hint as well).
template <class Tree, class Key>
std::pair<typename Tree::iterator, const void*> neighbour_in_order(Tree& tree, const Key& key) {
  auto at = tree.lower_bound(key);
  if (at != tree.end()) return {at, &*at};
  return {at, tree.empty() ? nullptr : static_cast<const void*>(&*std::prev(at))};
}

// Node handles (extract, then insert) move their element into a new node
// placed by the hint, and free the handle's: the nodes land near their
// neighbours, and libstdc++ 12 is kept from leaking. When its tree takes a
// handle's node it clears the handle's pointer without destroying the
// handle's copy of the allocator, and a HintedAllocator's copy holds a
// reference to its shared state (LeakSanitizer finds one lost per insertion).
// The cost: one allocation and one free per handle inserted.

// Inserts `key` into `tree` unless it is there: one search finds both the
// position and the neighbour to hint, then place(position) makes the node
// (std::set/map's emplace_hint). The one path of every hinted insertion.
template <class Tree, class Key, class Place>
std::pair<typename Tree::iterator, bool> insert_in_order(Tree& tree, const Key& key, Place place) {
  auto [at, near] = neighbour_in_order(tree, key);
  if (at != tree.end() && !tree.key_comp()(key, Tree::key_of(*at))) return {at, false};  // there already
  tree.get_allocator().hint(near);
  return {place(at), true};
}

// A node handle's insertion (see above): place(node) moves its element
// into a hinted node ({position, inserted}); the handle is then emptied,
// or, not inserted, handed back in the result.
template <class Tree, class Node, class Place>
typename Tree::insert_return_type insert_node(Tree& tree, Node& node, Place place) {
  if (node.empty()) return {tree.end(), false, Node()};
  auto [at, added] = place(node);  // moves out of the node only if it inserts
  if (!added) return {at, false, std::move(node)};
  node = Node();
  return {at, true, Node()};
}
// The same, for the position-hinted overload: a handle not inserted stays
// with the caller, unchanged.
template <class Tree, class Node, class Place>
typename Tree::iterator insert_node_keeping(Tree& tree, Node& node, Place place) {
  typename Tree::insert_return_type r = insert_node(tree, node, place);
  if (!r.inserted && !r.node.empty()) node = std::move(r.node);
  return r.position;
}

// std::set whose insertions hint the new key's neighbour in key order, so
// that an in-order walk (iteration, range queries) finds neighbours on the
// same pages. Every standard insert and emplace overload is here; each
// searches once, for the hint and the position together, so the position
// hint a caller passes is accepted and not needed. Everything else is
// std::set's.
template <class Key, class Compare = std::less<Key>>
class hinted_set : public std::set<Key, Compare, HintedAllocator<Key>> {
  using base = std::set<Key, Compare, HintedAllocator<Key>>;

 public:
  using typename base::const_iterator;
  using typename base::insert_return_type;
  using typename base::iterator;
  using typename base::node_type;
  explicit hinted_set(Heap& heap, const Compare& less = Compare()) : base(less, HintedAllocator<Key>(heap)) {}

  std::pair<iterator, bool> insert(const Key& key) { return insert_hinted(key); }
  std::pair<iterator, bool> insert(Key&& key) { return insert_hinted(std::move(key)); }
  iterator insert(const_iterator, const Key& key) { return insert_hinted(key).first; }
  iterator insert(const_iterator, Key&& key) { return insert_hinted(std::move(key)).first; }
  template <class It>
  void insert(It from, It to) {
    for (; from != to; ++from) emplace(*from);
  }
  void insert(std::initializer_list<Key> keys) { insert(keys.begin(), keys.end()); }
  // A node handle's element moves into a new, hinted node (see
  // insert_in_order); a handle that is not inserted keeps its element.
  insert_return_type insert(node_type&& node) {
    return insert_node(*this, node, [this](node_type& n) { return insert_hinted(std::move(n.value())); });
  }
  iterator insert(const_iterator, node_type&& node) {
    return insert_node_keeping(*this, node, [this](node_type& n) { return insert_hinted(std::move(n.value())); });
  }
  template <class... Args>
  std::pair<iterator, bool> emplace(Args&&... args) {
    return insert_hinted(Key(std::forward<Args>(args)...));
  }
  template <class... Args>
  iterator emplace_hint(const_iterator, Args&&... args) {
    return emplace(std::forward<Args>(args)...).first;
  }

  static const Key& key_of(const Key& key) { return key; }

 private:
  template <class K>
  std::pair<iterator, bool> insert_hinted(K&& key) {
    return insert_in_order(*this, key, [&](iterator at) { return base::emplace_hint(at, std::forward<K>(key)); });
  }
};

// std::map whose insertions (every standard insert, insert_or_assign,
// emplace, emplace_hint, try_emplace and operator[] overload) hint the new
// key's neighbour in key order; see hinted_set.
template <class Key, class T, class Compare = std::less<Key>>
class hinted_map : public std::map<Key, T, Compare, HintedAllocator<std::pair<const Key, T>>> {
  using base = std::map<Key, T, Compare, HintedAllocator<std::pair<const Key, T>>>;

 public:
  using typename base::const_iterator;
  using typename base::insert_return_type;
  using typename base::iterator;
  using typename base::node_type;
  using typename base::value_type;
  explicit hinted_map(Heap& heap, const Compare& less = Compare())
      : base(less, HintedAllocator<value_type>(heap)) {}

  template <class... Args>
  std::pair<iterator, bool> try_emplace(const Key& key, Args&&... args) {
    return try_emplace_hinted(key, std::forward<Args>(args)...);
  }
  template <class... Args>
  std::pair<iterator, bool> try_emplace(Key&& key, Args&&... args) {
    return try_emplace_hinted(std::move(key), std::forward<Args>(args)...);
  }
  template <class... Args>
  iterator try_emplace(const_iterator, const Key& key, Args&&... args) {
    return try_emplace_hinted(key, std::forward<Args>(args)...).first;
  }
  template <class... Args>
  iterator try_emplace(const_iterator, Key&& key, Args&&... args) {
    return try_emplace_hinted(std::move(key), std::forward<Args>(args)...).first;
  }
  template <class M>
  std::pair<iterator, bool> insert_or_assign(const Key& key, M&& mapped) {
    return insert_or_assign_hinted(key, std::forward<M>(mapped));
  }
  template <class M>
  std::pair<iterator, bool> insert_or_assign(Key&& key, M&& mapped) {
    return insert_or_assign_hinted(std::move(key), std::forward<M>(mapped));
  }
  template <class M>
  iterator insert_or_assign(const_iterator, const Key& key, M&& mapped) {
    return insert_or_assign_hinted(key, std::forward<M>(mapped)).first;
  }
  template <class M>
  iterator insert_or_assign(const_iterator, Key&& key, M&& mapped) {
    return insert_or_assign_hinted(std::move(key), std::forward<M>(mapped)).first;
  }
  std::pair<iterator, bool> insert(const value_type& v) {
    return insert_in_order(*this, v.first, [&](iterator at) { return base::emplace_hint(at, v); });
  }
  std::pair<iterator, bool> insert(value_type&& v) { return emplace(std::move(v)); }
  template <class P>
    requires std::constructible_from<value_type, P&&>
  std::pair<iterator, bool> insert(P&& p) {
    return emplace(std::forward<P>(p));
  }
  iterator insert(const_iterator, const value_type& v) { return insert(v).first; }
  iterator insert(const_iterator, value_type&& v) { return emplace(std::move(v)).first; }
  template <class P>
    requires std::constructible_from<value_type, P&&>
  iterator insert(const_iterator, P&& p) {
    return emplace(std::forward<P>(p)).first;
  }
  template <class It>
  void insert(It from, It to) {
    for (; from != to; ++from) emplace(*from);
  }
  void insert(std::initializer_list<value_type> values) { insert(values.begin(), values.end()); }
  insert_return_type insert(node_type&& node) {
    return insert_node(*this, node, [this](node_type& n) {
      return try_emplace_hinted(std::move(n.key()), std::move(n.mapped()));
    });
  }
  iterator insert(const_iterator, node_type&& node) {
    return insert_node_keeping(*this, node, [this](node_type& n) {
      return try_emplace_hinted(std::move(n.key()), std::move(n.mapped()));
    });
  }
  // The pair is made before the search, since the key is in it; it is then
  // moved into the node.
  template <class... Args>
  std::pair<iterator, bool> emplace(Args&&... args) {
    value_type v(std::forward<Args>(args)...);
    return insert_in_order(*this, v.first, [&](iterator at) { return base::emplace_hint(at, std::move(v)); });
  }
  template <class... Args>
  iterator emplace_hint(const_iterator, Args&&... args) {
    return emplace(std::forward<Args>(args)...).first;
  }
  T& operator[](const Key& key) { return try_emplace(key).first->second; }
  T& operator[](Key&& key) { return try_emplace(std::move(key)).first->second; }

  static const Key& key_of(const value_type& v) { return v.first; }

 private:
  template <class K, class... Args>
  std::pair<iterator, bool> try_emplace_hinted(K&& key, Args&&... args) {
    return insert_in_order(*this, key, [&](iterator at) {
      return base::emplace_hint(at, std::piecewise_construct, std::forward_as_tuple(std::forward<K>(key)),
                                std::forward_as_tuple(std::forward<Args>(args)...));
    });
  }
  template <class K, class M>
  std::pair<iterator, bool> insert_or_assign_hinted(K&& key, M&& mapped) {
    auto placed = insert_in_order(*this, key, [&](iterator at) {
      return base::emplace_hint(at, std::forward<K>(key), std::forward<M>(mapped));
    });
    if (!placed.second) placed.first->second = std::forward<M>(mapped);
    return placed;
  }
};

// std::deque whose growth hints the element the new chunk will continue:
// push_back and emplace_back hint the last element, push_front and
// emplace_front the first. libstdc++ allocates a deque's elements in
// chunks of 512 bytes (or one element, if bigger) as an end fills, so the
// next chunk lands by the one it follows and a walk from end to end steps
// through neighbouring memory. The map of chunk pointers, reallocated now
// and then, takes the hint too: a size that is not the hint's class is
// served the plain way. Other insertions (insert, resize, assign) pass no
// fresh hint. Everything else is std::deque's.
template <class T>
class hinted_deque : public std::deque<T, HintedAllocator<T>> {
  using base = std::deque<T, HintedAllocator<T>>;

 public:
  explicit hinted_deque(Heap& heap) : base(HintedAllocator<T>(heap)) {}

  template <class... Args>
  T& emplace_back(Args&&... args) {
    this->get_allocator().hint(this->empty() ? nullptr : &this->back());
    return base::emplace_back(std::forward<Args>(args)...);
  }
  template <class... Args>
  T& emplace_front(Args&&... args) {
    this->get_allocator().hint(this->empty() ? nullptr : &this->front());
    return base::emplace_front(std::forward<Args>(args)...);
  }
  void push_back(const T& v) { emplace_back(v); }
  void push_back(T&& v) { emplace_back(std::move(v)); }
  void push_front(const T& v) { emplace_front(v); }
  void push_front(T&& v) { emplace_front(std::move(v)); }
};

}  // namespace memd
