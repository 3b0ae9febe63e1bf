// Allocation hints (alloc_near, after the TP/Medius slides): a free object
// of the hint's block within the asked distance is the one given; any
// other hint -- null, foreign, another thread's, another class's, a big
// object -- is the plain path and leaves the heap consistent; the STL
// allocator takes a container's hint through std::allocator_traits.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "client/allocators.h"
#include "client/heap.h"
#include "client/memd.h"
#include "heap_fixture.h"

namespace memd {
namespace {

uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }
uintptr_t distance(const void* a, const void* b) { return addr(a) > addr(b) ? addr(a) - addr(b) : addr(b) - addr(a); }

class NearTest : public testing::HeapFixture {
 protected:
  void SetUp() override {
    HeapFixture::SetUp();
    for (int i = 0; i < 512; ++i) v_.push_back(heap_->alloc(64));
    // An object with its two neighbours 64 B either side, all in one page
    // (a block of small objects is a page).
    for (k_ = 1; k_ + 30 < v_.size(); ++k_) {
      if (addr(v_[k_]) - addr(v_[k_ - 1]) == 64 && addr(v_[k_ + 30]) - addr(v_[k_]) == 30 * 64 &&
          addr(v_[k_ - 1]) >> 12 == addr(v_[k_ + 30]) >> 12) {
        break;
      }
    }
    ASSERT_LT(k_ + 30, v_.size()) << "no run of 32 consecutive objects in one page";
  }
  void TearDown() override {
    for (void* p : v_) heap_->free(p);
    EXPECT_EQ(heap_->stat().busy_objects, 0u);
    ExpectConsistent();
  }
  std::vector<void*> v_;
  size_t k_ = 0;
};

TEST_F(NearTest, TheFreeNeighbourOfTheHintIsTheOneGiven) {
  void* neighbour = v_[k_ - 1];
  void* same_page = v_[k_ + 30];
  heap_->free(neighbour);
  heap_->free(same_page);  // now first on the block's free list
  void* p = heap_->alloc_near(64, v_[k_], Heap::kNearLine);
  EXPECT_EQ(p, neighbour);
  EXPECT_LE(distance(p, v_[k_]), Heap::kNearLine);
  v_[k_ - 1] = p;
  void* q = heap_->alloc_near(64, v_[k_], Heap::kNearPage);
  EXPECT_EQ(q, same_page);
  v_[k_ + 30] = q;
}

// The heap's sampling countdown (a probe every 256 KiB on average with
// sampling off) ends at an allocation nobody chose; a hint must be honoured
// there too. Some 10 MiB of hinted allocations pass dozens of ends.
TEST_F(NearTest, AHintIsHonouredWhereverTheSamplingCountdownEnds) {
  void* neighbour = v_[k_ - 1];
  void* same_page = v_[k_ + 30];
  for (int round = 0; round < 80000; ++round) {
    heap_->free(neighbour);
    heap_->free(same_page);  // first on the free list: what the plain path would give
    void* p = heap_->alloc_near(64, v_[k_], Heap::kNearLine);
    void* q = heap_->alloc_near(64, v_[k_], Heap::kNearPage);
    v_[k_ - 1] = p;
    v_[k_ + 30] = q;
    ASSERT_EQ(p, neighbour) << "round " << round;
    ASSERT_EQ(q, same_page) << "round " << round;
  }
}

TEST_F(NearTest, WithNothingFreeNearbyTheHintIsThePlainPath) {
  void* far = v_[k_ + 30];
  heap_->free(far);
  // The free one is 1920 B away: not within a line, so the plain path
  // serves (which may, or may not, be that object: it is the current
  // block's business), and the heap's books stay right.
  void* p = heap_->alloc_near(64, v_[k_], Heap::kNearLine);
  ASSERT_NE(p, nullptr);
  if (p == far) {
    v_[k_ + 30] = p;
    return;
  }
  v_.push_back(p);
  void* q = heap_->alloc_near(64, v_[k_], Heap::kNearPage);
  EXPECT_EQ(q, far);
  v_[k_ + 30] = q;
}

TEST_F(NearTest, AnyOtherHintIsThePlainPathAndHarmless) {
  int on_stack = 0;
  auto other = Heap::create();
  ASSERT_TRUE(other.ok());
  void* foreign = (*other)->alloc(64);
  void* big = heap_->alloc(1 << 20);
  void* other_class = heap_->alloc(500);
  std::vector<const void*> hints = {nullptr, &on_stack, foreign, big, other_class, v_[k_],
                                    reinterpret_cast<const void*>(addr(v_[k_]) + 3)};
  std::set<void*> seen(v_.begin(), v_.end());
  for (const void* hint : hints) {
    for (size_t near : {Heap::kNearLine, Heap::kNearPage, Heap::kNearBlock}) {
      void* p = heap_->alloc_near(64, hint, near);
      ASSERT_NE(p, nullptr);
      ASSERT_TRUE(seen.insert(p).second);
      ASSERT_GE(heap_->size(p), 64u);
      v_.push_back(p);
    }
  }
  heap_->free(big);
  heap_->free(other_class);
  (*other)->free(foreign);
}

TEST_F(NearTest, AnotherThreadsBlockIsNeverTakenFrom) {
  std::vector<void*> theirs(64);
  std::atomic<int> stage{0};
  // The other thread stays alive (its blocks stay its own) while this one
  // allocates with hints into them.
  std::thread t([&] {
    for (auto& p : theirs) p = heap_->alloc(64);
    for (size_t i = 0; i < theirs.size(); i += 2) heap_->free(theirs[i]);  // on their block's local list
    stage = 1;
    while (stage.load() != 2) std::this_thread::yield();
  });
  while (stage.load() != 1) std::this_thread::yield();
  std::set<void*> their_free;
  for (size_t i = 0; i < theirs.size(); i += 2) their_free.insert(theirs[i]);
  for (int i = 0; i < 40; ++i) {
    void* p = heap_->alloc_near(64, theirs[1], Heap::kNearBlock);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(their_free.count(p), 0u) << "took from another thread's free list";
    v_.push_back(p);
  }
  stage = 2;
  t.join();
  for (size_t i = 1; i < theirs.size(); i += 2) heap_->free(theirs[i]);
}

TEST_F(NearTest, TheStlAllocatorTakesAContainersHint) {
  struct Node {
    Node* next;
    uint64_t value[6];
  };
  static_assert(sizeof(Node) == 56);
  Allocator<Node> a(*heap_);
  using Traits = std::allocator_traits<Allocator<Node>>;
  Node* first = Traits::allocate(a, 1);
  Node* second = Traits::allocate(a, 1, first);
  Node* gap = Traits::allocate(a, 1, second);
  Traits::deallocate(a, second, 1);
  Node* again = Traits::allocate(a, 1, first);  // the freed neighbour comes back
  EXPECT_EQ(again, second);
  EXPECT_LE(distance(again, first), Heap::kNearPage);
  for (Node* n : {first, again, gap}) Traits::deallocate(a, n, 1);
}

TEST_F(NearTest, TheCNameIsTheSameCall) {
  auto* h = reinterpret_cast<memd_heap*>(heap_.get());
  void* neighbour = v_[k_ + 1];
  memd_free(h, neighbour);
  void* p = memd_alloc_near(h, 64, v_[k_], MEMD_NEAR_LINE);
  EXPECT_EQ(p, neighbour);
  v_[k_ + 1] = p;
  void* q = memd_alloc_near(h, 64, nullptr, MEMD_NEAR_BLOCK);
  ASSERT_NE(q, nullptr);
  v_.push_back(q);
}

}  // namespace
}  // namespace memd
