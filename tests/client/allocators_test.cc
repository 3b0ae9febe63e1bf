// The std adapters: containers whose memory comes from a memd heap.
#include "client/allocators.h"

#include <gtest/gtest.h>

#include <map>
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

}  // namespace
}  // namespace memd
