// memd::hinted_list and HintedAllocator: a list that hints each new node
// with the element it follows is still a std::list in every result, and,
// on a heap with holes, places nodes near their predecessors where the
// same insertions through memd::Allocator do not.
#include "client/hinted.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
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

// `count` nodes made by add(i), each followed by another object of a
// node's size (64 B), half of those then freed at random: holes in the
// container's own blocks. Returns the others left (nullptr: freed).
template <class Add>
std::vector<void*> build_with_holes(Heap& heap, std::mt19937& rng, int count, Add add) {
  std::vector<void*> others;
  for (int i = 0; i < count; ++i) {
    others.push_back(heap.alloc(64));
    add(i);
  }
  for (void*& p : others) {
    if (rng() % 2 == 0) heap.free(p), p = nullptr;
  }
  return others;
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
  std::vector<typename List::iterator> at;
  std::vector<void*> others = build_with_holes(heap, rng, 5000, [&](int) {
    list.push_back(Payload{});
    at.push_back(std::prev(list.end()));
  });
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

// Where the last insertion was hinted to land.
template <class Container>
const void* last_hint(const Container& c) {
  return c.get_allocator().state()->next.load();
}

// Every standard insert overload compiles, gives std::list's result, and
// goes the hinted way (the last node of a range is hinted with the node
// before it).
TEST_F(HintedTest, EveryListInsertOverloadHints) {
  hinted_list<int> h(*heap_);
  std::list<int> s;
  const std::vector<int> v{1, 2, 3};
  auto hi = h.insert(h.cend(), v.begin(), v.end());
  auto si = s.insert(s.cend(), v.begin(), v.end());
  EXPECT_EQ(*hi, *si);
  EXPECT_EQ(last_hint(h), &*std::next(h.begin()));  // 3 was hinted with 2
  h.insert(h.cbegin(), size_t{2}, 7), s.insert(s.cbegin(), size_t{2}, 7);
  EXPECT_EQ(last_hint(h), &h.front());  // the second 7 follows the first
  h.insert(std::next(h.cbegin()), {4, 5}), s.insert(std::next(s.cbegin()), {4, 5});
  EXPECT_EQ(last_hint(h), &*std::next(h.begin()));  // 5 was hinted with 4
  int x = 9;
  h.insert(h.cend(), x), s.insert(s.cend(), x);
  h.insert(h.cend(), 10), s.insert(s.cend(), 10);
  h.emplace(h.cbegin(), 11), s.emplace(s.cbegin(), 11);
  h.emplace_front(12), s.emplace_front(12);
  h.emplace_back(13), s.emplace_back(13);
  h.push_front(x), s.push_front(x);
  h.push_back(x), s.push_back(x);
  EXPECT_EQ(last_hint(h), &*std::prev(h.end(), 2));
  EXPECT_EQ(h.insert(h.cbegin(), v.begin(), v.begin()), h.begin());  // nothing inserted: pos
  EXPECT_EQ(h.insert(h.cend(), size_t{0}, 1), h.end());
  EXPECT_TRUE(std::equal(h.begin(), h.end(), s.begin(), s.end()));
  h.clear();
  EXPECT_EQ(heap_->stat().busy_objects, 0u);
  ExpectConsistent();
}

TEST_F(HintedTest, EverySetAndMapInsertOverloadHints) {
  hinted_set<int> hs(*heap_);
  std::set<int> ss;
  const std::vector<int> keys{2, 4, 6};
  hs.insert(keys.begin(), keys.end()), ss.insert(keys.begin(), keys.end());
  hs.insert({1, 5}), ss.insert({1, 5});
  EXPECT_EQ(last_hint(hs), &*hs.find(6));  // 5 sits before 6
  int k = 3;
  EXPECT_EQ(*hs.insert(hs.cend(), k), 3);
  ss.insert(k);
  EXPECT_EQ(last_hint(hs), &*hs.find(4));
  hs.insert(hs.cbegin(), 8), ss.insert(8);
  EXPECT_EQ(last_hint(hs), &*hs.find(6));  // past the last: hinted with the last
  hs.emplace_hint(hs.cbegin(), 7), ss.emplace(7);
  EXPECT_FALSE(hs.insert(k).second);
  auto node = hs.extract(3);
  ss.erase(3);
  node.value() = 30;
  EXPECT_TRUE(hs.insert(std::move(node)).inserted);
  ss.insert(30);
  EXPECT_EQ(*hs.insert(hs.cend(), hs.extract(30)), 30);
  EXPECT_EQ(last_hint(hs), &*hs.find(8));  // a handle's element lands by its neighbour too
  auto twice = hs.extract(4);
  hs.insert(4);
  auto refused = hs.insert(std::move(twice));  // 4 is there: the handle comes back
  EXPECT_FALSE(refused.inserted);
  ASSERT_FALSE(refused.node.empty());
  EXPECT_EQ(refused.node.value(), 4);
  EXPECT_EQ(*hs.insert(hs.cbegin(), std::move(refused.node)), 4);
  EXPECT_FALSE(refused.node.empty());  // not inserted: unchanged
  EXPECT_TRUE(std::equal(hs.begin(), hs.end(), ss.begin(), ss.end()));

  hinted_map<int, std::string> hm(*heap_);
  std::map<int, std::string> sm;
  const std::vector<std::pair<const int, std::string>> pairs{{2, "b"}, {4, "d"}};
  hm.insert(pairs.begin(), pairs.end()), sm.insert(pairs.begin(), pairs.end());
  hm.insert({{6, "f"}, {8, "h"}}), sm.insert({{6, "f"}, {8, "h"}});
  const std::pair<const int, std::string> one{1, "a"};
  hm.insert(one), sm.insert(one);
  EXPECT_EQ(last_hint(hm), &*hm.find(2));
  hm.insert(std::pair<const int, std::string>{3, "c"}), sm.insert({3, "c"});
  hm.insert(std::make_pair(5, "e")), sm.insert(std::make_pair(5, "e"));  // insert(P&&)
  EXPECT_EQ(last_hint(hm), &*hm.find(6));
  hm.insert(hm.cend(), one), hm.insert(hm.cend(), std::make_pair(7, "g")), sm.insert({7, "g"});
  hm.insert(hm.cbegin(), std::pair<const int, std::string>{9, "i"}), sm.insert({9, "i"});
  int ten = 10;
  hm.try_emplace(ten, "j"), sm.try_emplace(ten, "j");
  hm.try_emplace(11, 2, 'k'), sm.try_emplace(11, 2, 'k');
  hm.try_emplace(hm.cend(), ten, "not placed"), sm.try_emplace(ten, "not placed");
  hm.try_emplace(hm.cend(), 12, "l"), sm.try_emplace(12, "l");
  EXPECT_EQ(last_hint(hm), &*hm.find(11));
  EXPECT_FALSE(hm.insert_or_assign(ten, "J").second);
  sm.insert_or_assign(ten, "J");
  EXPECT_TRUE(hm.insert_or_assign(13, "m").second);
  sm.insert_or_assign(13, "m");
  hm.insert_or_assign(hm.cend(), ten, "JJ"), sm.insert_or_assign(ten, "JJ");
  hm.insert_or_assign(hm.cbegin(), 0, "z"), sm.insert_or_assign(0, "z");
  EXPECT_EQ(last_hint(hm), &*hm.find(1));
  hm.emplace(14, "n"), sm.emplace(14, "n");
  hm.emplace_hint(hm.cend(), 15, "o"), sm.emplace(15, "o");
  hm[ten] += "!", sm[ten] += "!";
  hm[16] = "p", sm[16] = "p";
  auto node2 = hm.extract(16);
  node2.key() = 17;
  sm.erase(16), sm[17] = "p";
  EXPECT_TRUE(hm.insert(std::move(node2)).inserted);
  EXPECT_EQ(hm.insert(hm.cend(), hm.extract(17))->second, "p");
  auto twice_m = hm.extract(14);
  hm[14] = "N";
  auto refused_m = hm.insert(std::move(twice_m));
  EXPECT_FALSE(refused_m.inserted);
  ASSERT_FALSE(refused_m.node.empty());
  EXPECT_EQ(refused_m.node.mapped(), "n");
  sm[14] = "N";
  EXPECT_TRUE(std::equal(hm.begin(), hm.end(), sm.begin(), sm.end()));
  refused.node = {};  // the handles not inserted free their nodes
  refused_m.node = {};
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
  std::vector<void*> others = build_with_holes(heap, rng, 5000, [&](int i) {
    set.insert(typename Set::value_type{{static_cast<uint64_t>(i) * 4}});
  });
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

struct Elem64 {
  uint64_t v[8];  // 8 to a 512-byte chunk of libstdc++'s deque
};

// A deque of 1,000 chunks built with 7 other objects of a chunk's size
// made after each chunk, all then freed in random order (room by every
// chunk, and free lists in no order), then grown by as many chunks again:
// the fraction of the new chunks within a page of the chunk they continue.
template <class Deque>
double chunks_near_fraction(Heap& heap, Deque& dq) {
  std::mt19937 rng(7);
  std::vector<void*> others;
  uint64_t n = 0;
  for (int c = 0; c < 1000; ++c) {
    for (int i = 0; i < 8; ++i) dq.push_back(Elem64{{n++}});
    for (int k = 0; k < 7; ++k) others.push_back(heap.alloc(512));
  }
  std::shuffle(others.begin(), others.end(), rng);
  for (void* p : others) heap.free(p);
  const size_t first = dq.size();
  for (int c = 0; c < 1000; ++c) {
    for (int i = 0; i < 8; ++i) dq.push_back(Elem64{{n++}});
  }
  size_t near = 0, pairs = 0;
  for (size_t k = first; k < dq.size(); k += 8) {
    auto a = reinterpret_cast<uintptr_t>(&dq[k - 1]), b = reinterpret_cast<uintptr_t>(&dq[k]);
    near += (a > b ? a - b : b - a) <= 4096;
    ++pairs;
  }
  for (size_t i = 0; i < dq.size(); ++i) EXPECT_EQ(dq[i].v[0], i);
  return static_cast<double>(near) / static_cast<double>(pairs);
}

TEST_F(HintedTest, DequeChunksLandNearTheChunkTheyContinue) {
  double with_hints, without;
  {
    hinted_deque<Elem64> hinted(*heap_);
    with_hints = chunks_near_fraction(*heap_, hinted);
  }
  auto other = Heap::create();
  ASSERT_TRUE(other.ok());
  {
    std::deque<Elem64, Allocator<Elem64>> plain{Allocator<Elem64>(**other)};
    without = chunks_near_fraction(**other, plain);
  }
  EXPECT_GE(with_hints, 0.8) << "without hints: " << without;
  EXPECT_GT(with_hints, without + 0.3) << "without hints: " << without;
  EXPECT_EQ(heap_->stat().busy_objects, 0u);
  ExpectConsistent();
}

TEST_F(HintedTest, ADequeIsADequeAndHintsItsEnds) {
  {
  hinted_deque<Elem64> dq(*heap_);
  std::deque<uint64_t> model;
  std::mt19937 rng(3);
  for (uint64_t i = 0; i < 3000; ++i) {
    switch (rng() % 5) {
      case 0: dq.push_front(Elem64{{i}}); model.push_front(i); break;
      case 1: dq.emplace_front(Elem64{{i}}); model.push_front(i); break;
      case 2: {
        const void* last = dq.empty() ? nullptr : &dq.back();
        dq.push_back(Elem64{{i}});
        model.push_back(i);
        EXPECT_EQ(dq.get_allocator().state()->next.load(), last) << "push_back did not hint the last element";
        break;
      }
      case 3: dq.emplace_back(Elem64{{i}}); model.push_back(i); break;
      default:
        if (!model.empty()) {
          dq.pop_front();
          model.pop_front();
        }
    }
  }
  ASSERT_EQ(dq.size(), model.size());
  for (size_t i = 0; i < model.size(); ++i) EXPECT_EQ(dq[i].v[0], model[i]);
  }
  EXPECT_EQ(heap_->stat().busy_objects, 0u);
  ExpectConsistent();
}

}  // namespace
}  // namespace memd
