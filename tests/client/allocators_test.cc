// The std adapters: containers whose memory comes from a memd heap.
#include "client/allocators.h"

#include <gtest/gtest.h>

#include <list>
#include <map>
#include <set>
#include <memory_resource>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace memd {
namespace {

std::unique_ptr<Heap> NewHeap() { return std::move(Heap::create().value()); }

TEST(Allocators, StlContainersLiveInTheHeap) {
  auto heap = NewHeap();
  using String = std::basic_string<char, std::char_traits<char>, Allocator<char>>;
  std::vector<String, Allocator<String>> names{Allocator<String>(*heap)};
  for (int i = 0; i < 1000; ++i) {
    std::string text = "a name long enough to leave the small-string buffer #" + std::to_string(i);
    names.emplace_back(text.c_str(), Allocator<char>(*heap));
  }
  EXPECT_TRUE(heap->contains(names.data()));
  EXPECT_TRUE(heap->contains(names[500].data()));
  EXPECT_TRUE(std::string_view(names[999]).ends_with("#999"));

  std::map<int, int, std::less<int>, Allocator<std::pair<const int, int>>> squares{
      Allocator<std::pair<const int, int>>(*heap)};
  for (int i = 0; i < 5000; ++i) squares[i] = i * i;
  EXPECT_EQ(squares.at(70), 4900);
  EXPECT_GT(heap->stat().busy_objects, 6000u);
  names.clear();
  names.shrink_to_fit();
  squares.clear();
  EXPECT_TRUE(heap->check().ok());
}

TEST(Allocators, PmrResourceServesAlignedRequestsAndRejectsOtherHeaps) {
  auto heap = NewHeap();
  auto other = NewHeap();
  HeapResource resource(*heap);
  std::pmr::unordered_map<int, std::pmr::string> m(&resource);
  for (int i = 0; i < 2000; ++i) m.emplace(i, std::pmr::string(100, 'x'));
  EXPECT_EQ(m.at(1234).size(), 100u);
  void* p = resource.allocate(100, 256);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  EXPECT_TRUE(heap->contains(p));
  resource.deallocate(p, 100, 256);
  HeapResource same(*heap), different(*other);
  EXPECT_TRUE(resource.is_equal(same));
  EXPECT_FALSE(resource.is_equal(different));
}

TEST(Allocators, ExhaustionThrowsBadAlloc) {
  HeapOptions small;
  small.reserve_bytes = 64 << 20;
  auto heap = std::move(Heap::create(small).value());
  Allocator<char> a(*heap);
  EXPECT_THROW(a.allocate(size_t{1} << 30), std::bad_alloc);
  EXPECT_THROW(Allocator<uint64_t>(*heap).allocate(SIZE_MAX / 4), std::bad_array_new_length);
  HeapResource r(*heap);
  EXPECT_THROW((void)r.allocate(size_t{1} << 30), std::bad_alloc);
}

struct Node48 {
  uint64_t v[6];
};

TEST(Allocators, NodeAllocatorTakesNodesInBatchesAndGivesThemAllBack) {
  auto heap = NewHeap();
  using Alloc = NodeAllocator<Node48>;
  {
    std::list<Node48, Alloc> l{Alloc(*heap)};
    l.push_back(Node48{{1}});
    // One alloc_batch: the node, and the rest of the batch kept aside.
    EXPECT_EQ(heap->stat().busy_objects, 16u);
    for (uint64_t i = 2; i <= 16; ++i) l.push_back(Node48{{i}});
    EXPECT_EQ(heap->stat().busy_objects, 16u) << "a new batch before the first was used up";
    l.push_back(Node48{{17}});
    EXPECT_EQ(heap->stat().busy_objects, 32u);
    // Freed nodes go back to the cache, at most two batches of them: the
    // rest go back to the heap.
    for (uint64_t i = 18; i <= 1000; ++i) l.push_back(Node48{{i}});
    EXPECT_LE(heap->stat().busy_objects, 1000u + 31u);
    for (auto it = l.begin(); it != l.end();) it = it->v[0] % 3 == 0 ? l.erase(it) : std::next(it);
    EXPECT_LE(heap->stat().busy_objects, l.size() + 32u);
    uint64_t want = 1;
    for (const Node48& n : l) {
      if (want % 3 == 0) ++want;
      EXPECT_EQ(n.v[0], want++);
    }
    // Another container's allocator shares no cache, and frees what this
    // one made (one heap).
    std::list<Node48, Alloc> other{Alloc(*heap)};
    other.splice(other.end(), l, l.begin());
    EXPECT_EQ(other.front().v[0], 1u);
    std::set<int, std::less<int>, NodeAllocator<int>> s{NodeAllocator<int>(*heap)};
    for (int i = 0; i < 500; ++i) s.insert(i * 7 % 500);
    EXPECT_EQ(s.size(), 500u);
    EXPECT_EQ(*s.begin(), 0);
  }
  EXPECT_EQ(heap->stat().busy_objects, 0u) << "the caches were not given back";
  EXPECT_TRUE(heap->check().ok());
}

TEST(Allocators, NodeAllocatorServesArraysAndOverAlignedTypesSingly) {
  auto heap = NewHeap();
  struct alignas(64) Wide {
    char c[64];
  };
  {
    std::vector<int, NodeAllocator<int>> v{NodeAllocator<int>(*heap)};
    v.resize(1000);
    EXPECT_TRUE(heap->contains(v.data()));
    std::list<Wide, NodeAllocator<Wide>> l{NodeAllocator<Wide>(*heap)};
    l.emplace_back();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(&l.front()) % 64, 0u);
    EXPECT_EQ(heap->stat().busy_objects, 2u) << "an array or an over-aligned node went through a batch";
  }
  EXPECT_EQ(heap->stat().busy_objects, 0u);
}

}  // namespace
}  // namespace memd
