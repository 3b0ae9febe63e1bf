// Object-group merging of call-chain pools (region/chain_merge.h, the DPA
// paper's section 3.2) through memd::Heap: pools whose objects point to each
// other (type I) or hang off one field of another pool's objects (type II)
// become one pool, and what they allocate from then on lies together.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "client/heap.h"
#include "region/chain_merge.h"
#include "region/chain_pools.h"

namespace memd {
namespace {

struct Node {
  Node* next;
  uint64_t value;
  char pad[24];
};
static_assert(sizeof(Node) == 40);  // the 48-byte class

struct Parent {
  Node* child;
  uint64_t value;
  char pad[48];
};
static_assert(sizeof(Parent) == 64);

// Sites of their own (bodies differ: identical functions may be folded).
// Each notes an address of its own body after its allocation: the return
// address of that allocation lies between the site's start and that mark,
// whichever frame of a chain it is (a build that does not tail-call, as
// under AddressSanitizer, puts Heap::alloc's own frame first).
enum Site { kFront, kBack, kParent, kLeft, kRight, kLoner, kDecoy, kSites };
uintptr_t site_mark[kSites];
__attribute__((noinline)) void mark_site(int site) {
  site_mark[site] = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  asm volatile("" ::: "memory");
}
#define SITE(name, type, site)                       \
  __attribute__((noinline)) type* name(Heap& h) {    \
    void* p = h.alloc(sizeof(type));                 \
    mark_site(site);                                 \
    asm volatile("# " #name ::"r"(p) : "memory");    \
    return static_cast<type*>(p);                    \
  }
SITE(list_front_site, Node, kFront)
SITE(list_back_site, Node, kBack)
SITE(parent_site, Parent, kParent)
SITE(left_child_site, Node, kLeft)
SITE(right_child_site, Node, kRight)
SITE(loner_site, Node, kLoner)
SITE(decoy_site, Node, kDecoy)

// The pools of the chains with a frame in site function `fn` (whose mark
// is `site`).
std::vector<uint32_t> pools_of(const void* fn, Site site) {
  auto start = reinterpret_cast<uintptr_t>(fn);
  region::ChainRecord records[256];
  size_t n = region::chain_pools_list(records, 256);
  std::vector<uint32_t> pools;
  for (size_t i = 0; i < n; ++i) {
    if (records[i].outcome != region::ChainOutcome::kPooled) continue;
    bool in_site = false;
    for (uint32_t d = 0; d < records[i].depth; ++d) {
      in_site = in_site || (records[i].frames[d] > start && records[i].frames[d] < site_mark[site]);
    }
    if (in_site) pools.push_back(records[i].pool);
  }
  return pools;
}

double adjacent_share(const std::vector<Node*>& nodes, size_t from) {
  size_t adjacent = 0;
  for (size_t i = from + 1; i < nodes.size(); ++i) {
    adjacent += reinterpret_cast<char*>(nodes[i]) - reinterpret_cast<char*>(nodes[i - 1]) == 48;
  }
  return static_cast<double>(adjacent) / static_cast<double>(nodes.size() - from - 1);
}

class ChainMergeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    heap_ = Heap::create().value();
    heap_->set_chain_pools(true);
  }
  std::unique_ptr<Heap> heap_;
};

TEST_F(ChainMergeTest, TwoSitesBuildingOneListEndInOnePool) {
  region::ChainMergeStats before = region::chain_merge_stats();
  // A list whose nodes two functions append in turn: each site's chain
  // gets a pool, and every node points to a node of the other pool.
  std::vector<Node*> nodes;
  Node* tail = nullptr;
  for (int i = 0; i < 4000; ++i) {
    Node* n = i % 2 == 0 ? list_front_site(*heap_) : list_back_site(*heap_);
    ASSERT_NE(n, nullptr);
    n->next = nullptr;
    n->value = static_cast<uint64_t>(i);
    std::memset(n->pad, 0, sizeof n->pad);
    if (tail != nullptr) tail->next = n;
    tail = n;
    nodes.push_back(n);
  }
  region::ChainMergeStats after = region::chain_merge_stats();
  EXPECT_GE(after.type_one, before.type_one + 1);
  std::vector<uint32_t> front = pools_of(reinterpret_cast<const void*>(&list_front_site), kFront);
  std::vector<uint32_t> back = pools_of(reinterpret_cast<const void*>(&list_back_site), kBack);
  ASSERT_EQ(front.size(), 1u);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(front[0], back[0]) << "the two sites' pools were not merged";
  // From the merge on, the list's nodes follow one another in memory as
  // they were appended (two pools would alternate between two blocks).
  EXPECT_GT(adjacent_share(nodes, 2000), 0.8);
  for (Node* n : nodes) heap_->free(n);
}

TEST_F(ChainMergeTest, ChildrenOfOneFieldFromTwoSitesEndInOnePool) {
  region::ChainMergeStats before = region::chain_merge_stats();
  // Parents (64 B) whose first field points to a child (40 B) made at one of
  // two sites in turn; children point nowhere. No edge joins the two
  // children's pools: they share the parents' field (type II).
  std::vector<Parent*> parents;
  std::vector<Node*> children;
  for (int i = 0; i < 4000; ++i) {
    Node* c = i % 2 == 0 ? left_child_site(*heap_) : right_child_site(*heap_);
    Parent* p = parent_site(*heap_);
    ASSERT_TRUE(c != nullptr && p != nullptr);
    std::memset(c, 0, sizeof *c);
    std::memset(p, 0, sizeof *p);
    p->child = c;
    p->value = static_cast<uint64_t>(i);
    parents.push_back(p);
    children.push_back(c);
  }
  region::ChainMergeStats after = region::chain_merge_stats();
  EXPECT_GE(after.type_two, before.type_two + 1);
  std::vector<uint32_t> left = pools_of(reinterpret_cast<const void*>(&left_child_site), kLeft);
  std::vector<uint32_t> right = pools_of(reinterpret_cast<const void*>(&right_child_site), kRight);
  std::vector<uint32_t> parent = pools_of(reinterpret_cast<const void*>(&parent_site), kParent);
  ASSERT_EQ(left.size(), 1u);
  ASSERT_EQ(right.size(), 1u);
  ASSERT_EQ(parent.size(), 1u);
  EXPECT_EQ(left[0], right[0]) << "the children's pools were not merged";
  EXPECT_NE(parent[0], left[0]) << "a pool of another size was merged";
  EXPECT_GT(adjacent_share(children, 2000), 0.8);
  for (Parent* p : parents) heap_->free(p);
  for (Node* c : children) heap_->free(c);
}

TEST_F(ChainMergeTest, APoolNothingPointsIntoStaysApart) {
  // A list of one site beside the earlier tests' pools: its nodes point only
  // to their own pool's, which merges nothing.
  // (The first allocations alternate with another site's, which point
  // nowhere: run alone in a build that does not tail-call, Heap::alloc's
  // call would otherwise have one caller, and be the loner's whole chain.)
  std::vector<Node*> nodes;
  std::vector<Node*> decoys;
  Node* tail = nullptr;
  for (int i = 0; i < 2000; ++i) {
    Node* n = loner_site(*heap_);
    ASSERT_NE(n, nullptr);
    std::memset(n, 0, sizeof *n);
    if (tail != nullptr) tail->next = n;
    tail = n;
    nodes.push_back(n);
    if (i < 300) {
      decoys.push_back(decoy_site(*heap_));
      ASSERT_NE(decoys.back(), nullptr);
      std::memset(decoys.back(), 0, sizeof(Node));
    }
  }
  std::vector<uint32_t> loner = pools_of(reinterpret_cast<const void*>(&loner_site), kLoner);
  ASSERT_EQ(loner.size(), 1u);
  region::ChainRecord records[256];
  size_t n = region::chain_pools_list(records, 256);
  for (size_t i = 0; i < n; ++i) {
    if (records[i].outcome == region::ChainOutcome::kPooled && records[i].own_pool != loner[0]) {
      EXPECT_NE(records[i].pool, loner[0]) << "another pool was merged into the loner's";
    }
  }
  EXPECT_GT(adjacent_share(nodes, 400), 0.9);
  for (Node* p : nodes) heap_->free(p);
  for (Node* p : decoys) heap_->free(p);
}

}  // namespace
}  // namespace memd
