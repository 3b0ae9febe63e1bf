// memd::offset_ptr<T>: a pointer that stays valid when the memory holding it
// is mapped at another address.
//
// A region is mapped by several processes, each at an address of its own
// choosing, so a raw pointer stored inside a region is only right in the
// process that wrote it. An offset_ptr stores the distance in bytes from its
// own address to its target instead. Both move together with the mapping, so
// a structure built in one mapping reads the same through every other one.
// That holds as long as pointer and target live in the same mapping; an
// offset_ptr in a region that points outside it (to a stack, to another
// region) is as process-local as a raw pointer.
//
// Representation:
//  - distance 1 means null. Distance 0 must stay a real pointer: a circular
//    list's empty sentinel points at itself, and its link is often the node's
//    first member, so "the address of the pointer" is a real target. A target
//    one byte into the pointer's own storage never is, so 1 is free to mean
//    null (Boost.Interprocess makes the same choice). The consequence: the
//    default, value-initialized offset_ptr is null, not indeterminate.
//  - copy and assignment recompute the distance from the destination's
//    address, so the class is deliberately not trivially copyable: memcpy of
//    an offset_ptr to another address changes its target. Copy the objects
//    that hold offset_ptrs with their constructors, never with memcpy.
//  - no atomicity: concurrent writers of one offset_ptr need a lock.
//
// Standard containers. `pointer = offset_ptr<T>` in an allocator makes these
// position independent with libstdc++ 12:
//  - std::vector and std::basic_string keep every pointer they own in the
//    allocator's pointer type. basic_string also converts that pointer to
//    `_CharT*` implicitly (c_str(), _S_copy), which is why offset_ptr has an
//    implicit conversion to T*. The raw pointer it yields is only valid in
//    the current mapping: use it, never store it in a region.
//  - std::list, std::map/set and std::unordered_map/set are NOT: their nodes
//    link each other with raw pointers whatever the allocator's pointer
//    (_List_node_base::_M_next, _Rb_tree_node_base::_M_parent/_M_left/
//    _M_right, _Hash_node_base::_M_nxt and the raw bucket array), and the
//    header node embedded in the container points at itself with raw
//    pointers too. Only the allocation goes through offset_ptr. They are
//    valid only across processes that map the region at the same address.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <type_traits>

namespace memd {

template <class T>
class offset_ptr;

namespace detail {

// Iterator typedefs only for object types: std::iterator_traits<void*> does
// not exist either, and declaring them for void would advertise arithmetic
// that offset_ptr<void> does not have.
template <class T, bool = std::is_void_v<T>>
struct offset_ptr_iterator_types {};

template <class T>
struct offset_ptr_iterator_types<T, false> {
  using iterator_category = std::random_access_iterator_tag;
  using iterator_concept = std::contiguous_iterator_tag;
  using value_type = std::remove_cv_t<T>;
  using pointer = T*;
  using reference = T&;
};

}  // namespace detail

template <class T>
class offset_ptr : public detail::offset_ptr_iterator_types<T> {
  static constexpr std::ptrdiff_t kNull = 1;

 public:
  using element_type = T;
  using difference_type = std::ptrdiff_t;
  // std::pointer_traits<offset_ptr<T>>::rebind<U> (and through it
  // allocator_traits' const_pointer, void_pointer, ...) uses this.
  template <class U>
  using rebind = offset_ptr<U>;

  offset_ptr() noexcept = default;
  offset_ptr(std::nullptr_t) noexcept {}
  offset_ptr(T* p) noexcept { set(p); }
  // Not `= default`: the distance must be measured from the new address.
  offset_ptr(const offset_ptr& o) noexcept { set(o.get()); }

  // Implicit where U* converts to T* (derived to base, T to const T, T to
  // void); explicit where only static_cast<T*> does (void to T, base to
  // derived), which is what allocator code does with void_pointer.
  template <class U>
    requires(!std::is_same_v<U, T>) && requires(U* u) { static_cast<T*>(u); }
  explicit(!std::is_convertible_v<U*, T*>) offset_ptr(const offset_ptr<U>& o) noexcept {
    set(static_cast<T*>(o.get()));
  }

  offset_ptr& operator=(const offset_ptr& o) noexcept {
    set(o.get());  // get() reads before set() writes: self-assignment is fine
    return *this;
  }
  template <class U>
    requires(!std::is_same_v<U, T>) && std::is_convertible_v<U*, T*>
  offset_ptr& operator=(const offset_ptr<U>& o) noexcept {
    set(o.get());
    return *this;
  }
  offset_ptr& operator=(T* p) noexcept {
    set(p);
    return *this;
  }
  offset_ptr& operator=(std::nullptr_t) noexcept {
    off_ = kNull;
    return *this;
  }

  T* get() const noexcept {
    if (off_ == kNull) return nullptr;
    // Integer arithmetic: the target is not in the same C++ object as the
    // pointer, so pointer subtraction/addition between them would be UB.
    return reinterpret_cast<T*>(reinterpret_cast<std::uintptr_t>(this) +
                                static_cast<std::uintptr_t>(off_));
  }
  // See the header comment: libstdc++'s basic_string needs this.
  operator T*() const noexcept { return get(); }
  explicit operator bool() const noexcept { return off_ != kNull; }
  bool operator!() const noexcept { return off_ == kNull; }

  // Unconstrained even for void: std::to_address falls back to operator->.
  T* operator->() const noexcept { return get(); }
  std::add_lvalue_reference_t<T> operator*() const noexcept
    requires(!std::is_void_v<T>)
  {
    return *get();
  }
  std::add_lvalue_reference_t<T> operator[](difference_type n) const noexcept
    requires(!std::is_void_v<T>)
  {
    return get()[n];
  }

  // std::pointer_traits<offset_ptr<T>>::pointer_to calls this; basic_string
  // uses it to point at its in-object (SSO) buffer. A template so that the
  // declaration stays valid for T = void, where there is no T&.
  template <class U = T>
    requires(!std::is_void_v<U>) && std::is_same_v<U, T>
  static offset_ptr pointer_to(U& r) noexcept {
    return offset_ptr(std::addressof(r));
  }

  // Arithmetic moves the target, which is the same as moving the distance;
  // going through get() keeps null + 0 == null without a special case.
  offset_ptr& operator+=(difference_type n) noexcept
    requires(!std::is_void_v<T>)
  {
    set(get() + n);
    return *this;
  }
  offset_ptr& operator-=(difference_type n) noexcept
    requires(!std::is_void_v<T>)
  {
    set(get() - n);
    return *this;
  }
  offset_ptr& operator++() noexcept
    requires(!std::is_void_v<T>)
  {
    return *this += 1;
  }
  offset_ptr& operator--() noexcept
    requires(!std::is_void_v<T>)
  {
    return *this -= 1;
  }
  offset_ptr operator++(int) noexcept
    requires(!std::is_void_v<T>)
  {
    offset_ptr old(*this);
    ++*this;
    return old;
  }
  offset_ptr operator--(int) noexcept
    requires(!std::is_void_v<T>)
  {
    offset_ptr old(*this);
    --*this;
    return old;
  }
  friend offset_ptr operator+(const offset_ptr& p, difference_type n) noexcept
    requires(!std::is_void_v<T>)
  {
    return offset_ptr(p.get() + n);
  }
  friend offset_ptr operator+(difference_type n, const offset_ptr& p) noexcept
    requires(!std::is_void_v<T>)
  {
    return offset_ptr(p.get() + n);
  }
  friend offset_ptr operator-(const offset_ptr& p, difference_type n) noexcept
    requires(!std::is_void_v<T>)
  {
    return offset_ptr(p.get() - n);
  }

 private:
  void set(T* p) noexcept {
    off_ = p == nullptr ? kNull
                        : static_cast<std::ptrdiff_t>(reinterpret_cast<std::uintptr_t>(p) -
                                                      reinterpret_cast<std::uintptr_t>(this));
  }

  std::ptrdiff_t off_ = kNull;
};

// Comparisons and differences are templates over both sides so that
// offset_ptr<T> meets offset_ptr<const T> (a container's iterator against
// its const_iterator) and raw pointers without ambiguous conversions.
template <class T, class U>
  requires std::equality_comparable_with<T*, U*>
bool operator==(const offset_ptr<T>& a, const offset_ptr<U>& b) noexcept {
  return a.get() == b.get();
}
template <class T, class U>
  requires std::three_way_comparable_with<T*, U*>
std::strong_ordering operator<=>(const offset_ptr<T>& a, const offset_ptr<U>& b) noexcept {
  return std::compare_three_way{}(a.get(), b.get());
}
template <class T, class U>
  requires std::equality_comparable_with<T*, U*>
bool operator==(const offset_ptr<T>& a, U* b) noexcept {
  return a.get() == b;
}
template <class T, class U>
  requires std::three_way_comparable_with<T*, U*>
std::strong_ordering operator<=>(const offset_ptr<T>& a, U* b) noexcept {
  return std::compare_three_way{}(a.get(), b);
}
template <class T>
bool operator==(const offset_ptr<T>& a, std::nullptr_t) noexcept {
  return !a;
}
template <class T>
std::strong_ordering operator<=>(const offset_ptr<T>& a, std::nullptr_t) noexcept {
  return std::compare_three_way{}(a.get(), static_cast<T*>(nullptr));
}

template <class T, class U>
  requires(!std::is_void_v<T>) && std::is_same_v<std::remove_cv_t<T>, std::remove_cv_t<U>>
std::ptrdiff_t operator-(const offset_ptr<T>& a, const offset_ptr<U>& b) noexcept {
  return a.get() - b.get();
}

// The casts smart pointers offer, for code that must cast away const or
// reinterpret, which the converting constructor deliberately does not do.
template <class T, class U>
offset_ptr<T> static_pointer_cast(const offset_ptr<U>& p) noexcept {
  return offset_ptr<T>(static_cast<T*>(p.get()));
}
template <class T, class U>
offset_ptr<T> const_pointer_cast(const offset_ptr<U>& p) noexcept {
  return offset_ptr<T>(const_cast<T*>(p.get()));
}
template <class T, class U>
offset_ptr<T> reinterpret_pointer_cast(const offset_ptr<U>& p) noexcept {
  return offset_ptr<T>(reinterpret_cast<T*>(p.get()));
}

}  // namespace memd

// Hash the address, not the stored distance: two offset_ptrs at different
// places with the same target have different distances but are equal.
template <class T>
struct std::hash<memd::offset_ptr<T>> {
  std::size_t operator()(const memd::offset_ptr<T>& p) const noexcept {
    return std::hash<T*>{}(p.get());
  }
};
