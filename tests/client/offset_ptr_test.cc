// memd::offset_ptr: pointer semantics first, then position independence
// checked for real: one memfd mapped at several addresses of this process,
// and once more in a forked child, with a linked list, a vector and strings
// built in one mapping and read and changed through the others.
#include "region/offset_ptr.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <new>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace memd {
namespace {

// What containers and algorithms rely on, checked at compile time.
static_assert(sizeof(offset_ptr<int>) == sizeof(std::ptrdiff_t));
static_assert(!std::is_trivially_copyable_v<offset_ptr<int>>, "memcpy would move the target");
static_assert(std::contiguous_iterator<offset_ptr<int>>);
static_assert(std::contiguous_iterator<offset_ptr<const int>>);
static_assert(std::is_same_v<std::iterator_traits<offset_ptr<int>>::iterator_category,
                             std::random_access_iterator_tag>);
static_assert(std::is_same_v<std::iterator_traits<offset_ptr<const int>>::value_type, int>);
static_assert(std::is_same_v<std::pointer_traits<offset_ptr<int>>::rebind<const void>,
                             offset_ptr<const void>>);
static_assert(std::is_same_v<std::pointer_traits<offset_ptr<void>>::element_type, void>);
// Implicit where the raw pointers convert implicitly ...
static_assert(std::is_convertible_v<offset_ptr<int>, offset_ptr<const int>>);
static_assert(std::is_convertible_v<offset_ptr<int>, offset_ptr<void>>);
static_assert(std::is_convertible_v<offset_ptr<void>, offset_ptr<const void>>);
// ... explicit where only static_cast works, and never dropping const.
static_assert(!std::is_convertible_v<offset_ptr<void>, offset_ptr<int>>);
static_assert(std::is_constructible_v<offset_ptr<int>, offset_ptr<void>>);
static_assert(!std::is_constructible_v<offset_ptr<int>, offset_ptr<const int>>);
static_assert(!std::is_constructible_v<offset_ptr<void>, offset_ptr<const void>>);

TEST(OffsetPtr, NullIsTheDefault) {
  offset_ptr<int> a;
  offset_ptr<int> b = nullptr;
  offset_ptr<int> c(static_cast<int*>(nullptr));
  offset_ptr<int> d{};
  for (const auto& p : {a, b, c, d}) {
    EXPECT_FALSE(p);
    EXPECT_TRUE(!p);
    EXPECT_EQ(p, nullptr);
    EXPECT_EQ(p.get(), nullptr);
    EXPECT_EQ(std::to_address(p), nullptr);
  }
  EXPECT_EQ(a + 0, nullptr);
  offset_ptr<const void> v;
  EXPECT_FALSE(v);
}

TEST(OffsetPtr, PointingAtItselfIsNotNull) {
  // An empty circular list: the sentinel's link, its first member, points at
  // the sentinel, i.e. at distance 0 from itself.
  struct Ring {
    offset_ptr<Ring> next;
    int tag = 7;
  } ring;
  ring.next = &ring;
  EXPECT_TRUE(ring.next);
  EXPECT_EQ(ring.next.get(), &ring);
  EXPECT_EQ(ring.next->tag, 7);
  EXPECT_EQ(static_cast<void*>(&ring.next), static_cast<void*>(ring.next.get()));
}

TEST(OffsetPtr, CopiesToOtherAddressesKeepTheTarget) {
  int x = 1, y = 2;
  offset_ptr<int> a(&x);
  auto far = std::make_unique<offset_ptr<int>>(a);  // on the heap, far from a
  EXPECT_EQ(far->get(), &x);
  std::vector<offset_ptr<int>> many(100, a);
  many.resize(1000, a);  // reallocates: every element copied again
  for (const auto& p : many) ASSERT_EQ(p.get(), &x);

  offset_ptr<int> b;
  b = a;
  EXPECT_EQ(b.get(), &x);
  b = &y;
  EXPECT_EQ(*b, 2);
  auto& alias = b;
  b = alias;  // self-assignment
  EXPECT_EQ(b.get(), &y);
  offset_ptr<int> moved(std::move(b));
  EXPECT_EQ(moved.get(), &y);
  std::swap(a, moved);
  EXPECT_EQ(a.get(), &y);
  EXPECT_EQ(moved.get(), &x);
  a = nullptr;
  EXPECT_FALSE(a);
}

TEST(OffsetPtr, Arithmetic) {
  int arr[10];
  std::iota(arr, arr + 10, 0);
  offset_ptr<int> p(arr);
  EXPECT_EQ(*p, 0);
  p += 3;
  EXPECT_EQ(*p, 3);
  EXPECT_EQ(p[2], 5);
  EXPECT_EQ(*++p, 4);
  EXPECT_EQ(*p++, 4);
  EXPECT_EQ(*p, 5);
  EXPECT_EQ(*--p, 4);
  EXPECT_EQ(*p--, 4);
  EXPECT_EQ(*p, 3);
  p -= 2;
  EXPECT_EQ(*p, 1);
  EXPECT_EQ(*(p + 4), 5);
  EXPECT_EQ(*(4 + p), 5);
  EXPECT_EQ(*(p + 4 - 2), 3);
  offset_ptr<int> end(arr + 10);
  EXPECT_EQ(end - p, 9);
  offset_ptr<const int> cend = end;
  EXPECT_EQ(cend - p, 9);  // const against non-const, as iterator - const_iterator
  EXPECT_EQ(p - cend, -9);

  struct Pair {
    int first, second;
  } pairs[2] = {{1, 2}, {3, 4}};
  offset_ptr<Pair> q(pairs);
  EXPECT_EQ(q->second, 2);
  EXPECT_EQ((q + 1)->first, 3);
}

TEST(OffsetPtr, Comparisons) {
  int arr[4] = {};
  offset_ptr<int> a(arr), b(arr + 2), a2(arr);
  offset_ptr<const int> cb(arr + 2);
  offset_ptr<int> null;
  EXPECT_TRUE(a == a2);
  EXPECT_TRUE(a != b);
  EXPECT_TRUE(a < b && a <= b && b > a && b >= a && a <= a2 && a >= a2);
  EXPECT_TRUE(b == cb && cb == b && a < cb && cb > a);
  EXPECT_EQ(a <=> b, std::strong_ordering::less);
  EXPECT_EQ(b <=> a, std::strong_ordering::greater);
  EXPECT_EQ(a <=> a2, std::strong_ordering::equal);
  // Against raw pointers, on either side.
  EXPECT_TRUE(a == arr && arr == a && b != arr && a < arr + 1 && arr + 3 > b);
  const int* craw = arr + 2;
  EXPECT_TRUE(b == craw && craw == b);
  // Against nullptr.
  EXPECT_TRUE(null == nullptr && nullptr == null && a != nullptr && nullptr != a);
  EXPECT_EQ(null <=> nullptr, std::strong_ordering::equal);
  EXPECT_EQ(a <=> nullptr, std::strong_ordering::greater);
  // void against object pointers.
  offset_ptr<const void> v = a;
  EXPECT_TRUE(v == a && a == v && v != b);
}

TEST(OffsetPtr, PointerTraitsToAddressAndHash) {
  int x = 5;
  using Traits = std::pointer_traits<offset_ptr<int>>;
  static_assert(std::is_same_v<Traits::element_type, int>);
  static_assert(std::is_same_v<Traits::difference_type, std::ptrdiff_t>);
  static_assert(std::is_same_v<Traits::rebind<double>, offset_ptr<double>>);
  EXPECT_EQ(Traits::pointer_to(x).get(), &x);
  const int cx = 6;
  EXPECT_EQ(std::pointer_traits<offset_ptr<const int>>::pointer_to(cx).get(), &cx);

  offset_ptr<int> p(&x);
  EXPECT_EQ(std::to_address(p), &x);
  offset_ptr<void> v = p;
  EXPECT_EQ(std::to_address(v), static_cast<void*>(&x));

  // Equal pointers at different addresses store different distances; the
  // hash follows the target.
  auto q = std::make_unique<offset_ptr<int>>(p);
  EXPECT_EQ(std::hash<offset_ptr<int>>{}(p), std::hash<offset_ptr<int>>{}(*q));
  EXPECT_EQ(std::hash<offset_ptr<int>>{}(p), std::hash<int*>{}(&x));
  std::unordered_set<offset_ptr<int>> set{p};
  EXPECT_TRUE(set.contains(*q));
  EXPECT_FALSE(set.contains(nullptr));
}

TEST(OffsetPtr, VoidAndClassConversions) {
  int x = 9;
  offset_ptr<void> v = offset_ptr<int>(&x);
  offset_ptr<const void> cv = v;
  EXPECT_EQ(*static_cast<offset_ptr<int>>(v), 9);  // what allocator code does
  EXPECT_EQ(*static_pointer_cast<const int>(cv), 9);
  offset_ptr<const int> ci(&x);
  offset_ptr<int> mi = const_pointer_cast<int>(ci);
  *mi = 10;
  EXPECT_EQ(x, 10);
  EXPECT_EQ(*reinterpret_pointer_cast<const unsigned>(ci), 10u);

  // Multiple inheritance: the conversion adjusts the address, and null stays
  // null instead of being adjusted.
  struct A {
    int a = 1;
  };
  struct B {
    int b = 2;
  };
  struct D : A, B {
    int d = 3;
  } obj;
  offset_ptr<D> pd(&obj);
  offset_ptr<B> pb = pd;
  EXPECT_EQ(pb.get(), static_cast<B*>(&obj));
  EXPECT_EQ(pb->b, 2);
  EXPECT_EQ(static_cast<offset_ptr<D>>(pb).get(), &obj);
  EXPECT_EQ(static_pointer_cast<D>(pb)->d, 3);
  offset_ptr<D> nd;
  offset_ptr<B> nb = nd;
  EXPECT_FALSE(nb);
}

TEST(OffsetPtr, IsARandomAccessIterator) {
  int arr[] = {5, 3, 9, 1, 7, 2};
  offset_ptr<int> first(arr), last(arr + 6);
  std::sort(first, last);
  EXPECT_TRUE(std::is_sorted(arr, arr + 6));
  std::ranges::sort(first, last, std::greater<>());
  EXPECT_EQ(arr[0], 9);
  std::span<int> s(first, 6);  // needs contiguous_iterator
  EXPECT_EQ(s.data(), arr);
  EXPECT_EQ(std::accumulate(first, last, 0), 27);
  EXPECT_EQ(std::distance(first, last), 6);
}

// ---- position independence across mappings ----------------------------------

constexpr std::size_t kFileSize = 1 << 20;

int NewSharedFile() {
  int fd = memfd_create("offset_ptr_test", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, kFileSize) != 0) return -1;
  return fd;
}

char* Map(int fd) {
  void* p = mmap(nullptr, kFileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
}

bool Inside(const void* p, const char* base) {
  auto* c = static_cast<const char*>(p);
  return c >= base && c < base + kFileSize;
}

// A bump allocator whose whole state sits at the start of the file, so that
// every mapping (and every process) allocates from the same arena.
struct Arena {
  std::size_t used;  // bytes from the arena's (= the file's) start
  std::size_t capacity;

  void* allocate(std::size_t bytes, std::size_t align) {
    std::size_t at = (used + align - 1) & ~(align - 1);
    if (at + bytes > capacity) throw std::bad_alloc();
    used = at + bytes;
    return reinterpret_cast<char*>(this) + at;
  }
};

template <class T>
struct ArenaAlloc {
  using value_type = T;
  using pointer = offset_ptr<T>;

  explicit ArenaAlloc(Arena& a) noexcept : arena(&a) {}
  template <class U>
  ArenaAlloc(const ArenaAlloc<U>& o) noexcept : arena(o.arena) {}

  pointer allocate(std::size_t n) {
    return pointer(static_cast<T*>(arena->allocate(n * sizeof(T), alignof(T))));
  }
  void deallocate(pointer, std::size_t) noexcept {}  // a bump arena frees nothing

  template <class U>
  bool operator==(const ArenaAlloc<U>& o) const noexcept {
    return arena == o.arena;
  }

  // Copies of the allocator live inside the containers, hence inside the
  // mapping: the arena is reached through an offset_ptr as well.
  offset_ptr<Arena> arena;
};

using IntVec = std::vector<int, ArenaAlloc<int>>;
using String = std::basic_string<char, std::char_traits<char>, ArenaAlloc<char>>;
using StringVec = std::vector<String, ArenaAlloc<String>>;

struct Node {
  int value;
  offset_ptr<Node> next;
};

// Everything a test builds, at offset 0 of the file; the arena comes first
// so that the containers can be given allocators over it.
struct Root {
  explicit Root(std::size_t capacity)
      : arena{sizeof(Root), capacity},
        numbers(ArenaAlloc<int>(arena)),
        text(ArenaAlloc<char>(arena)),
        names(ArenaAlloc<String>(arena)) {}

  Arena arena;
  offset_ptr<Node> list;
  IntVec numbers;
  String text;
  StringVec names;
};

Root& RootAt(char* base) { return *std::launder(reinterpret_cast<Root*>(base)); }

// Longer than libstdc++'s 15-character small-string buffer.
std::string LongName(int i) {
  return "a name well past the small-string buffer, #" + std::to_string(i);
}

void Build(Root& r, int count) {
  for (int i = 0; i < count; ++i) {
    auto* n = static_cast<Node*>(r.arena.allocate(sizeof(Node), alignof(Node)));
    r.list = new (n) Node{i, r.list};  // pushed at the front: count-1 ... 0
    r.numbers.push_back(i * i);
    // Alternate small (in the string object itself) and heap-sized strings.
    std::string name = i % 2 ? LongName(i) : std::to_string(i);
    r.names.emplace_back(name.c_str(), ArenaAlloc<char>(r.arena));
  }
  r.text = "some text that does not fit in the small-string buffer";
}

// Reads everything through the mapping at `base`, checking that every
// pointer followed lands inside that mapping.
void ExpectBuilt(char* base, int count) {
  Root& r = RootAt(base);
  int expect = count - 1;
  for (offset_ptr<Node> n = r.list; n; n = n->next, --expect) {
    ASSERT_TRUE(Inside(n.get(), base));
    ASSERT_EQ(n->value, expect);
  }
  EXPECT_EQ(expect, -1);
  ASSERT_EQ(r.numbers.size(), static_cast<std::size_t>(count));
  EXPECT_TRUE(Inside(r.numbers.data(), base));
  for (int i = 0; i < count; ++i) ASSERT_EQ(r.numbers[i], i * i);
  ASSERT_EQ(r.names.size(), static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    const String& s = r.names[i];
    ASSERT_TRUE(Inside(s.data(), base));
    ASSERT_EQ(std::string_view(s), i % 2 ? LongName(i) : std::to_string(i));
  }
}

TEST(OffsetPtrShared, TwoMappingsInOneProcess) {
  int fd = NewSharedFile();
  ASSERT_GE(fd, 0);
  char* a = Map(fd);
  char* b = Map(fd);
  ASSERT_TRUE(a && b);
  ASSERT_NE(a, b);

  constexpr int kCount = 200;
  Root& ra = *new (a) Root(kFileSize);
  Build(ra, kCount);
  EXPECT_GT(ra.text.capacity(), 15u);
  EXPECT_TRUE(Inside(ra.text.data(), a));
  ExpectBuilt(a, kCount);
  ExpectBuilt(b, kCount);

  // Change everything through B; A sees it.
  Root& rb = RootAt(b);
  const int* old_numbers = rb.numbers.data();
  for (int i = 0; i < 1000; ++i) rb.numbers.push_back(-i);  // reallocates in B
  EXPECT_NE(rb.numbers.data(), old_numbers);
  EXPECT_TRUE(Inside(rb.numbers.data(), b));
  rb.text += ", and grows from the other mapping";
  rb.names[0] = LongName(1000).c_str();  // was small, now allocated
  rb.names[1] = "short";                 // was allocated, stays in it
  rb.names.emplace_back(LongName(2000).c_str(), ArenaAlloc<char>(rb.arena));
  rb.list->value = 4242;

  EXPECT_EQ(ra.numbers.size(), kCount + 1000u);
  EXPECT_EQ(ra.numbers.back(), -999);
  EXPECT_TRUE(Inside(ra.numbers.data(), a));
  EXPECT_TRUE(std::string_view(ra.text).ends_with("from the other mapping"));
  EXPECT_EQ(std::string_view(ra.names[0]), LongName(1000));
  EXPECT_EQ(std::string_view(ra.names[1]), "short");
  EXPECT_EQ(std::string_view(ra.names.back()), LongName(2000));
  EXPECT_EQ(ra.list->value, 4242);

  // With A gone, nothing read through B may still lead into A.
  ASSERT_EQ(munmap(a, kFileSize), 0);
  EXPECT_EQ(rb.numbers[kCount + 999], -999);
  EXPECT_EQ(std::accumulate(rb.numbers.begin(), rb.numbers.begin() + kCount, 0L),
            [] {
              long sum = 0;
              for (long i = 0; i < kCount; ++i) sum += i * i;
              return sum;
            }());
  EXPECT_TRUE(std::string_view(rb.text).starts_with("some text"));
  EXPECT_EQ(std::string_view(rb.names[0]), LongName(1000));
  EXPECT_EQ(std::string_view(rb.names[2]), "2");
  EXPECT_EQ(std::string_view(rb.names[3]), LongName(3));
  int nodes = 0;
  for (auto n = rb.list; n; n = n->next, ++nodes) ASSERT_TRUE(Inside(n.get(), b));
  EXPECT_EQ(nodes, kCount);
  munmap(b, kFileSize);
  close(fd);
}

TEST(OffsetPtrShared, ForkedChildAppendsAtAThirdAddress) {
  int fd = NewSharedFile();
  ASSERT_GE(fd, 0);
  char* a = Map(fd);
  char* b = Map(fd);
  ASSERT_TRUE(a && b);
  Root& ra = *new (a) Root(kFileSize);
  constexpr int kCount = 8;
  ra.numbers.reserve(kCount);
  Build(ra, kCount);
  ASSERT_EQ(ra.numbers.size(), ra.numbers.capacity());  // the next push_back reallocates
  // Where the full buffer is, as an offset: the child must move it.
  std::ptrdiff_t before = reinterpret_cast<char*>(ra.numbers.data()) - a;

  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Only this process's own mapping may be used: map a third time, then
    // drop the two inherited mappings, so a pointer into them would fault.
    char* c = Map(fd);
    if (c == nullptr || c == a || c == b) _exit(2);
    munmap(a, kFileSize);
    munmap(b, kFileSize);
    Root& rc = RootAt(c);
    rc.numbers.push_back(12345);
    rc.names.emplace_back(LongName(77).c_str(), ArenaAlloc<char>(rc.arena));
    bool ok = Inside(rc.numbers.data(), c) && rc.numbers[3] == 9 &&
              Inside(rc.names.back().data(), c) && rc.names[5] == LongName(5).c_str();
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << WTERMSIG(status);
  ASSERT_EQ(WEXITSTATUS(status), 0);

  munmap(a, kFileSize);
  Root& rb = RootAt(b);
  ASSERT_EQ(rb.numbers.size(), kCount + 1u);
  EXPECT_GT(rb.numbers.capacity(), static_cast<std::size_t>(kCount));
  EXPECT_EQ(rb.numbers.back(), 12345);
  EXPECT_TRUE(Inside(rb.numbers.data(), b));
  EXPECT_NE(reinterpret_cast<char*>(rb.numbers.data()) - b, before);
  EXPECT_EQ(std::string_view(rb.names.back()), LongName(77));
  for (int i = 0; i < kCount; ++i) EXPECT_EQ(rb.numbers[i], i * i);
  munmap(b, kFileSize);
  close(fd);
}

}  // namespace
}  // namespace memd
