// The counted remote list under threads, against a shadow model. One owner
// thread allocates small and medium objects, fills each with a pattern of
// its own, frees some itself and hands the rest to freer threads, which
// check the pattern and free them: every such free is a remote free into
// the owner's blocks, collected by the owner without a walk whenever its
// block ran out. Now and then the owner hands one object to two freers at
// once (a racing double free).
//
// The shadow model knows which objects are live and where: the owner never
// gets an object that is live (held by it or by a freer); a freer never
// finds a pattern overwritten; of two racing frees exactly one succeeds.
// At quiet points the region check verifies every block, including that
// each remote list's count and tail match its objects; at the end every
// object is freed and every block must be found empty and released.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "region/thread_heap_pool.h"
#include "region/page_heap_owner.h"
#include "disciplines/anonymous.h"
#include "heap/inspect.h"
#include "heap/thread_heap.h"
#include "heap/region_format.h"

namespace memd::heap {
namespace {

struct Object {
  unsigned char* p;
  uint32_t size;
  uint64_t id;
};

unsigned char pattern(uint64_t id, size_t i) {
  return static_cast<unsigned char>((id * 0x9e3779b97f4a7c15ull + i * 0x2545f491ull) >> 56);
}
void fill(const Object& o) {
  for (size_t i = 0; i < o.size; ++i) o.p[i] = pattern(o.id, i);
}
bool intact(const Object& o) {
  for (size_t i = 0; i < o.size; ++i) {
    if (o.p[i] != pattern(o.id, i)) return false;
  }
  return true;
}

long operations() {
  if (const char* v = std::getenv("MEMD_STRESS_OPS")) return std::atol(v);
#if defined(MEMD_SANITIZER_THREAD) || defined(MEMD_SANITIZER_ADDRESS)
  return 60000;
#else
  return 400000;
#endif
}

// A freer: frees what lands in its inbox, from its own thread heap (so
// every free is remote). A pair entry is half of a racing double free.
class Freer {
 public:
  struct Entry {
    Object o;
    std::atomic<int>* pair_ok = nullptr;  // set for half of a racing double free
    std::atomic<int>* pair_done = nullptr;
  };

  Freer(region::ThreadHeapPool* pool, std::unordered_set<void*>* held, std::mutex* held_lock,
        std::atomic<long>* failures)
      : pool_(pool), held_(held), held_lock_(held_lock), failures_(failures), thread_([this] { run(); }) {}
  ~Freer() {
    {
      std::lock_guard<std::mutex> g(lock_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  void give(const Entry& e) {
    {
      std::lock_guard<std::mutex> g(lock_);
      inbox_.push_back(e);
      ++pending_;
    }
    cv_.notify_one();
  }
  bool idle() {
    std::lock_guard<std::mutex> g(lock_);
    return pending_ == 0;
  }

 private:
  void fail(const char* what, const Object& o) {
    if (failures_->fetch_add(1) < 10) ADD_FAILURE() << what << ": object " << o.id << " of " << o.size << " bytes";
  }
  void run() {
    ThreadHeap* heap = pool_->attach_thread();
    ASSERT_NE(heap, nullptr);
    for (;;) {
      std::deque<Entry> got;
      {
        std::unique_lock<std::mutex> g(lock_);
        cv_.wait(g, [this] { return stop_ || !inbox_.empty(); });
        if (inbox_.empty()) break;
        got.swap(inbox_);
      }
      for (const Entry& e : got) {
        if (e.pair_ok == nullptr) {
          if (!intact(e.o)) fail("pattern broken before a remote free", e.o);
          {
            std::lock_guard<std::mutex> g(*held_lock_);
            held_->erase(e.o.p);
          }
          if (heap->free(e.o.p) != FreeStatus::kOk) fail("remote free refused", e.o);
        } else {
          // The owner waits for both halves before it allocates again, so
          // the object cannot have been handed out anew in between.
          if (heap->free(e.o.p) == FreeStatus::kOk) e.pair_ok->fetch_add(1);
          e.pair_done->fetch_add(1, std::memory_order_release);
        }
        std::lock_guard<std::mutex> g(lock_);
        --pending_;
      }
    }
    pool_->detach_thread(heap);
  }

  region::ThreadHeapPool* pool_;
  std::unordered_set<void*>* held_;
  std::mutex* held_lock_;
  std::atomic<long>* failures_;
  std::mutex lock_;
  std::condition_variable cv_;
  std::deque<Entry> inbox_;
  long pending_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

class RemoteListStressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(source_.reserve(size_t{512} << 20));
    HeapParams params;
    params.discard_mode = DiscardMode::kNever;
    ASSERT_TRUE(region_format(source_, params, 16, 0x5a5a));
    pages_.init(&source_, Region::attach(source_.base()));
    ASSERT_TRUE(pool_.init(r(), &pages_.classes(), &pages_, kProcessHolder));
  }
  const Region& r() const { return pages_.region(); }
  void expect_consistent(const char* when) {
    char msg[256];
    EXPECT_TRUE(region_check(r(), pages_.classes(), msg, sizeof msg)) << when << ": " << msg;
  }

  disciplines::AnonymousSource source_;
  region::PageHeapOwner pages_;
  region::ThreadHeapPool pool_;
};

TEST_F(RemoteListStressTest, RemoteFreesIntoOneOwnerNeverHandAnObjectOutTwice) {
  constexpr int kFreers = 3;
  std::unordered_set<void*> held;  // given to freers and not yet freed by them
  std::mutex held_lock;
  std::atomic<long> failures{0};
  std::vector<std::unique_ptr<Freer>> freers;
  for (int i = 0; i < kFreers; ++i) freers.push_back(std::make_unique<Freer>(&pool_, &held, &held_lock, &failures));
  ThreadHeap* owner = pool_.attach_thread();
  ASSERT_NE(owner, nullptr);

  std::mt19937_64 rng(20240611);
  std::unordered_map<void*, Object> live;  // the owner's own objects
  std::vector<void*> live_list;            // the same, for picking at random
  uint64_t next_id = 1;
  int races = 0, race_failures = 0;
  auto fail = [&](const char* what, uint64_t id) {
    if (failures.fetch_add(1) < 10) ADD_FAILURE() << what << ": object " << id;
  };
  auto take_one = [&](size_t k) {
    void* p = live_list[k];
    live_list[k] = live_list.back();
    live_list.pop_back();
    Object o = live.at(p);
    live.erase(p);
    return o;
  };
  auto quiesce = [&] {
    for (auto& f : freers) {
      while (!f->idle()) std::this_thread::yield();
    }
  };

  const long ops = operations();
  for (long op = 0; op < ops && failures.load() < 10; ++op) {
    uint64_t roll = rng() % 100;
    if (roll < 50 || live_list.size() < 64) {
      Object o{nullptr, static_cast<uint32_t>(1 + rng() % 496), next_id++};
      o.p = static_cast<unsigned char*>(owner->alloc(o.size));
      if (o.p == nullptr) {
        fail("allocation failed", o.id);
        break;
      }
      if (live.count(o.p) != 0) fail("handed out while the owner holds it", o.id);
      {
        std::lock_guard<std::mutex> g(held_lock);
        if (held.count(o.p) != 0) fail("handed out while a freer holds it", o.id);
      }
      fill(o);
      live.emplace(o.p, o);
      live_list.push_back(o.p);
    } else if (roll < 60) {
      Object o = take_one(rng() % live_list.size());
      if (!intact(o)) fail("pattern broken before a local free", o.id);
      if (owner->free(o.p) != FreeStatus::kOk) fail("local free refused", o.id);
    } else if (roll < 99) {
      Object o = take_one(rng() % live_list.size());
      {
        std::lock_guard<std::mutex> g(held_lock);
        held.insert(o.p);
      }
      freers[rng() % kFreers]->give({o});
    } else {
      // A racing double free: two freers free the same object at once.
      Object o = take_one(rng() % live_list.size());
      if (!intact(o)) fail("pattern broken before a racing free", o.id);
      std::atomic<int> ok{0}, done{0};
      int first = static_cast<int>(rng() % kFreers);
      freers[first]->give({o, &ok, &done});
      freers[(first + 1) % kFreers]->give({o, &ok, &done});
      while (done.load(std::memory_order_acquire) != 2) std::this_thread::yield();
      ++races;
      if (ok.load() != 1) {
        ++race_failures;
        fail("racing frees of one object: not exactly one succeeded", o.id);
      }
    }
    if (op % 50000 == 49999) {
      quiesce();
      expect_consistent("mid-run");
    }
  }
  // Everything back: the owner's own objects, then whatever the freers hold.
  for (void* p : live_list) {
    if (!intact(live.at(p))) fail("pattern broken at the end", live.at(p).id);
    owner->free(p);
  }
  quiesce();
  expect_consistent("after the last free");
  owner->release_empty();
  RegionStats s = region_stat(r(), pages_.classes());
  EXPECT_EQ(s.busy_objects, 0u);
  // Blocks emptied by remote frees were found empty and given back.
  EXPECT_EQ(s.pages_in_use, 0u);
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(races, 0);
  EXPECT_EQ(race_failures, 0);
  freers.clear();
  pool_.detach_thread(owner);
}

}  // namespace
}  // namespace memd::heap
