// memd::hinted_list and HintedAllocator: a list that hints each new node
// with the element it follows is still a std::list in every result, and,
// on a heap with holes, places nodes near their predecessors where the
// same insertions through memd::Allocator do not.
#include "client/hinted.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <iterator>
#include <list>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "client/allocators.h"
#include "heap_fixture.h"

namespace memd {
namespace {

struct Payload {
  uint64_t v[6];  // with the list's two links, a node of 64 B
};

using HintedTest = testing::HeapFixture;

TEST_F(HintedTest, ItIsAListInEveryResult) {
  hinted_list<int> h(*heap_);
  std::list<int> s;
  std::mt19937 rng(3);
  for (int i = 0; i < 5000; ++i) {
    int op = static_cast<int>(rng() % 5);
    if (op == 0) {
      h.push_back(i), s.push_back(i);
    } else if (op == 1) {
      h.push_front(i), s.push_front(i);
    } else if (op == 2 && !s.empty()) {
      size_t at = rng() % s.size();
      auto hi = std::next(h.begin(), static_cast<long>(at));
      auto si = std::next(s.begin(), static_cast<long>(at));
      h.erase(hi), s.erase(si);
    } else {
      size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
      h.insert(std::next(h.cbegin(), static_cast<long>(at)), i);
      s.insert(std::next(s.cbegin(), static_cast<long>(at)), i);
    }
  }
  ASSERT_EQ(h.size(), s.size());
  EXPECT_TRUE(std::equal(h.begin(), h.end(), s.begin()));
  h.sort();
  s.sort();
  EXPECT_TRUE(std::equal(h.begin(), h.end(), s.begin()));
  h.clear();
  EXPECT_EQ(heap_->stat().busy_objects, 0u);
  ExpectConsistent();
}

// A list of 5,000 nodes built interleaved with as many other objects of
// the node's size, half of those then freed at random (holes in the
// list's own blocks), then 2,000 insertions after random elements (fewer
// than the holes, about 2,500): the
// fraction of inserted nodes within a page of the element they follow.
// The same operations for both lists.
template <class List>
double inserted_near_fraction(Heap& heap, List& list) {
  std::mt19937 rng(11);
  std::vector<void*> others;
  std::vector<typename List::iterator> at;
  for (int i = 0; i < 5000; ++i) {
    others.push_back(heap.alloc(64));
    list.push_back(Payload{});
    at.push_back(std::prev(list.end()));
  }
  for (void*& p : others) {
    if (rng() % 2 == 0) heap.free(p), p = nullptr;
  }
  size_t near = 0;
  for (int i = 0; i < 2000; ++i) {
    auto after = at[rng() % at.size()];
    auto it = list.insert(std::next(after), Payload{{static_cast<uint64_t>(i)}});
    auto a = reinterpret_cast<uintptr_t>(&*after), b = reinterpret_cast<uintptr_t>(&*it);
    near += (a > b ? a - b : b - a) <= 4096;
    at.push_back(it);
  }
  list.clear();
  for (void* p : others) heap.free(p);
  return static_cast<double>(near) / 2000.0;
}

TEST_F(HintedTest, NodesLandNearTheElementTheyFollow) {
  hinted_list<Payload> hinted(*heap_);
  double with_hints = inserted_near_fraction(*heap_, hinted);
  auto other = Heap::create();
  ASSERT_TRUE(other.ok());
  std::list<Payload, Allocator<Payload>> plain{Allocator<Payload>(**other)};
  double without = inserted_near_fraction(**other, plain);
  EXPECT_GE(with_hints, 0.8) << "without hints: " << without;
  EXPECT_GT(with_hints, without + 0.3) << "without hints: " << without;
  EXPECT_EQ(heap_->stat().busy_objects, 0u);
  ExpectConsistent();
}

TEST_F(HintedTest, AStaleHintIsOnlyAdvice) {
  hinted_list<Payload> l(*heap_);
  l.push_back(Payload{});
  const void* gone = &l.back();
  l.get_allocator().hint(gone);
  l.pop_back();  // the hinted element is freed
  HintedAllocator<Payload> a = l.get_allocator();
  Payload* p = std::allocator_traits<HintedAllocator<Payload>>::allocate(a, 1);
  ASSERT_NE(p, nullptr);
  std::allocator_traits<HintedAllocator<Payload>>::deallocate(a, p, 1);
  l.get_allocator().hint(reinterpret_cast<const void*>(uintptr_t{16}));  // not the heap's at all
  l.push_back(Payload{});
  l.get_allocator().hint(nullptr);
  l.clear();
  EXPECT_EQ(heap_->stat().busy_objects, 0u);
  ExpectConsistent();
}

TEST_F(HintedTest, ASetAndAMapAreASetAndAMapInEveryResult) {
  hinted_set<int> hs(*heap_);
  std::set<int> ss;
  hinted_map<int, std::string> hm(*heap_);
  std::map<int, std::string> sm;
  std::mt19937 rng(5);
  for (int i = 0; i < 20000; ++i) {
    int key = static_cast<int>(rng() % 3000);
    std::string text = std::to_string(i);
    switch (rng() % 6) {
      case 0: {
        auto [a, added_a] = hs.insert(key);
        auto [b, added_b] = ss.insert(key);
        ASSERT_EQ(added_a, added_b);
        ASSERT_EQ(*a, *b);
        break;
      }
      case 1:
        ASSERT_EQ(hs.emplace(key).second, ss.emplace(key).second);
        break;
      case 2:
        ASSERT_EQ(hs.erase(key), ss.erase(key));
        ASSERT_EQ(hm.erase(key), sm.erase(key));
        break;
      case 3:
        hm[key] += text, sm[key] += text;
        break;
      case 4: {
        auto [a, added_a] = hm.try_emplace(key, text);
        auto [b, added_b] = sm.try_emplace(key, text);
        ASSERT_EQ(added_a, added_b);
        ASSERT_EQ(a->second, b->second);
        break;
      }
      default: {
        auto [a, added_a] = hm.insert({key, text});
        auto [b, added_b] = sm.insert({key, text});
        ASSERT_EQ(added_a, added_b);
        ASSERT_EQ(a->second, b->second);
        ASSERT_EQ(hm.emplace(key + 1, text).second, sm.emplace(key + 1, text).second);
      }
    }
  }
  EXPECT_TRUE(std::equal(hs.begin(), hs.end(), ss.begin(), ss.end()));
  EXPECT_TRUE(std::equal(hm.begin(), hm.end(), sm.begin(), sm.end()));
  hs.clear();
  hm.clear();
  EXPECT_EQ(heap_->stat().busy_objects, 0u);
  ExpectConsistent();
}

// A set of 5,000 keys (every other even number) built interleaved with as
// many other objects of its node's size, half of those then freed, then
// 2,000 odd keys inserted: the fraction placed within a page of their
// neighbour in key order (the next key, an in-order walk's next step).
template <class Set>
double inserted_near_neighbour_fraction(Heap& heap, Set& set) {
  std::mt19937 rng(13);
  std::vector<void*> others;
  for (uint64_t i = 0; i < 5000; ++i) {
    others.push_back(heap.alloc(64));
    set.insert(typename Set::value_type{{i * 4}});
  }
  for (void*& p : others) {
    if (rng() % 2 == 0) heap.free(p), p = nullptr;
  }
  size_t near = 0;
  for (int i = 0; i < 2000; ++i) {
    uint64_t key = (rng() % 5000) * 4 + 1 + 2 * (rng() % 2);
    auto [it, added] = set.insert(typename Set::value_type{{key}});
    if (!added) continue;
    auto next = std::next(it);
    if (next == set.end()) next = std::prev(it);
    auto a = reinterpret_cast<uintptr_t>(&*it), b = reinterpret_cast<uintptr_t>(&*next);
    near += (a > b ? a - b : b - a) <= 4096;
  }
  size_t inserted = set.size() - 5000;
  set.clear();
  for (void* p : others) heap.free(p);
  return static_cast<double>(near) / static_cast<double>(inserted);
}

struct Key32 {
  uint64_t v[4];  // with a tree node's colour and three links, a node of 64 B
};
struct ByFirst {
  bool operator()(const Key32& a, const Key32& b) const { return a.v[0] < b.v[0]; }
};

TEST_F(HintedTest, SetNodesLandNearTheirNeighbourInKeyOrder) {
  hinted_set<Key32, ByFirst> hinted(*heap_);
  double with_hints = inserted_near_neighbour_fraction(*heap_, hinted);
  auto other = Heap::create();
  ASSERT_TRUE(other.ok());
  std::set<Key32, ByFirst, Allocator<Key32>> plain{ByFirst{}, Allocator<Key32>(**other)};
  double without = inserted_near_neighbour_fraction(**other, plain);
  EXPECT_GE(with_hints, 0.8) << "without hints: " << without;
  EXPECT_GT(with_hints, without + 0.3) << "without hints: " << without;
  EXPECT_EQ(heap_->stat().busy_objects, 0u);
  ExpectConsistent();
}

}  // namespace
}  // namespace memd
