// The C++ header over libmemd.so (client/memd.hpp, installed as
// <memd/memd.hpp>, target memd::client) against a real memd: handles close
// themselves in the order the C API needs, errors arrive as exceptions with
// the C API's errno, objects and roots are typed, and a file region's root
// outlives the connection and the daemon.
#include "client/memd.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <functional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "daemon_process.h"

namespace memd {
namespace {

struct Counter {
  std::uint64_t runs;
  std::uint64_t last_offset;
};

class CxxApiTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(d_.running()); }
  testing::DaemonProcess d_;
};

int errno_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::system_error& e) {
    return e.code().value();
  }
  return 0;
}

TEST_F(CxxApiTest, AFileRegionsRootAndObjectsOutliveTheConnectionAndTheDaemon) {
  api::OpenOptions o;
  o.discipline = api::Discipline::kFile;
  o.max_bytes = size_t{32} << 20;
  for (int round = 1; round <= 3; ++round) {
    SCOPED_TRACE(round);
    api::Client client = api::Client::connect(d_.socket());
    api::Region r = client.open("cxx-api", o);
    bool created = false;
    auto* counter = r.root<Counter>("counter", &created);
    EXPECT_EQ(created, round == 1);
    EXPECT_EQ(counter->runs, static_cast<std::uint64_t>(round - 1));
    if (round > 1) {  // the string the previous round left, found by its offset
      auto* left = r.at<std::string>(counter->last_offset);
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(left)), "round " + std::to_string(round - 1));
      r.deallocate(left);
    }
    std::string text = "round " + std::to_string(round);
    char* kept = static_cast<char*>(r.allocate(text.size() + 1));
    text.copy(kept, text.size());
    kept[text.size()] = '\0';
    counter->last_offset = r.offset_of(kept);
    counter->runs += 1;
    r.persist(kept, text.size() + 1);
    r.persist(counter, sizeof *counter);
    EXPECT_EQ(r.check(), "");
    EXPECT_EQ(r.find<Counter>("counter"), counter);
    EXPECT_EQ(r.find("absent"), nullptr);
    // client goes out of scope first here: the region keeps the connection.
    api::Client gone = std::move(client);
    (void)gone;
    if (round == 2) {
      r.close();
      ASSERT_EQ(d_.stop(), 0);
      d_.start();
      ASSERT_TRUE(d_.running());
    }
  }
}

TEST_F(CxxApiTest, TypedObjectsAreConstructedAndDestroyedInTheRegion) {
  struct Tracked {
    explicit Tracked(int v, int* destroyed) : value(v), destroyed(destroyed) {}
    ~Tracked() { ++*destroyed; }
    int value;
    int* destroyed;
  };
  api::Client client = api::Client::connect(d_.socket());
  api::Region r = client.open("typed");
  int destroyed = 0;
  std::vector<Tracked*> objects;
  for (int i = 0; i < 100; ++i) objects.push_back(r.make<Tracked>(i, &destroyed));
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(objects[i]->value, i);
    EXPECT_GE(r.size_of(objects[i]), sizeof(Tracked));
  }
  for (Tracked* t : objects) r.destroy(t);
  EXPECT_EQ(destroyed, 100);

  struct Throws {
    Throws() { throw std::runtime_error("constructor failed"); }
  };
  EXPECT_THROW(r.make<Throws>(), std::runtime_error);  // its memory is given back
  EXPECT_EQ(r.check(), "");
  auto* zeroed = static_cast<std::uint64_t*>(r.allocate_zeroed(512, sizeof(std::uint64_t)));
  for (int i = 0; i < 512; ++i) ASSERT_EQ(zeroed[i], 0u);
  r.deallocate(zeroed);
}

TEST_F(CxxApiTest, ErrorsAreExceptionsCarryingTheCApisErrno) {
  EXPECT_EQ(errno_of([&] { api::Client::connect(d_.dir() + "/no-such.sock"); }), ECONNREFUSED);
  api::Client client = api::Client::connect(d_.socket());
  api::OpenOptions missing;
  missing.create = false;
  EXPECT_EQ(errno_of([&] { client.open("missing", missing); }), ENOENT);
  api::OpenOptions small;
  small.max_bytes = size_t{8} << 20;
  api::Region r = client.open("small", small);
  api::OpenOptions again = small;
  again.exclusive = true;
  EXPECT_EQ(errno_of([&] { client.open("small", again); }), EEXIST);
  EXPECT_THROW(r.allocate(size_t{1} << 40), std::bad_alloc);
  api::Region moved = std::move(r);
  EXPECT_FALSE(r);
  EXPECT_TRUE(moved);
  EXPECT_EQ(errno_of([&] { r.allocate(8); }), EBADF);
  moved.close();
  EXPECT_FALSE(moved);
  EXPECT_EQ(api::version(), MEMD_PROJECT_VERSION);
}

}  // namespace
}  // namespace memd
