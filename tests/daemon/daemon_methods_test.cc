// Regions of the pool, last, debug and profile methods through the real
// daemon: made by an OpenRegion that names the method, shared by the
// processes that open it, refused (naming both methods) to a client that
// asks for another, and kept with their method, objects and books across a
// restart of the daemon.
#include <gtest/gtest.h>
#include <cstdio>
#include <set>

#include "region/call_site.h"

#include "tests/daemon/raw_session.h"
#include "tests/daemon/test_util.h"

namespace memd {
namespace {

using namespace memd::testing;

TEST(DaemonMethods, APoolRegionKeepsItsMethodAndObjectsAcrossARestart) {
  DaemonProcess d;
  ASSERT_TRUE(d.running()) << d.log();
  std::vector<uint64_t> offs;
  {
    std::unique_ptr<Client> c = connect_to(d);
    ASSERT_NE(c, nullptr);
    OpenOptions o = region_options(Discipline::kFile);
    o.method = Method::kPool;
    absl::StatusOr<std::unique_ptr<Region>> r = c->open("pooled", o);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)->method(), Method::kPool);
    for (uint32_t i = 0; i < 2000; ++i) {
      auto* p = static_cast<uint32_t*>((*r)->alloc(24));
      ASSERT_NE(p, nullptr);
      p[0] = i;
      p[5] = ~i;
      offs.push_back((*r)->offset_of(p));
    }
    bool created = false;
    auto* index = static_cast<uint64_t*>((*r)->root_bytes("index", offs.size() * 8, &created));
    ASSERT_NE(index, nullptr) << "a root of another size than the pool's comes from the best heap";
    std::copy(offs.begin(), offs.end(), index);

    // Another process that asks for the wrong method is told both.
    std::unique_ptr<Client> other = connect_to(d);
    OpenOptions wrong = region_options(Discipline::kFile);
    wrong.method = Method::kLast;
    absl::StatusOr<std::unique_ptr<Region>> refused = other->open("pooled", wrong);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(refused.status().message().find("managed by method pool, not last"), std::string_view::npos)
        << refused.status();

    // A process that leaves the method unspecified gets the region's, and
    // allocates beside the first without overlap.
    absl::StatusOr<std::unique_ptr<Region>> any = other->open("pooled", region_options(Discipline::kFile));
    ASSERT_TRUE(any.ok()) << any.status();
    EXPECT_EQ((*any)->method(), Method::kPool);
    std::set<uint64_t> live(offs.begin(), offs.end());
    for (int i = 0; i < 500; ++i) {
      void* p = (*any)->alloc(24);
      ASSERT_NE(p, nullptr);
      ASSERT_EQ(live.count((*any)->offset_of(p)), 0u);
      (*any)->free(p);
    }
    errno = 0;
    EXPECT_EQ((*any)->alloc(25), nullptr);
    EXPECT_EQ(errno, EINVAL);
  }
  EXPECT_EQ(d.stop(), 0);
  d.start();
  ASSERT_TRUE(d.running()) << d.log();
  std::unique_ptr<Client> c = connect_to(d);
  ASSERT_NE(c, nullptr);
  absl::StatusOr<std::unique_ptr<Region>> r = c->open("pooled", region_options(Discipline::kFile));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->method(), Method::kPool);
  MethodStats s = (*r)->method_stats();
  EXPECT_EQ(s.object_size, 24u);
  EXPECT_EQ(s.live_objects, 2000u);
  auto* index = static_cast<uint64_t*>((*r)->find_bytes("index"));
  ASSERT_NE(index, nullptr);
  for (uint32_t i = 0; i < 2000; ++i) {
    ASSERT_EQ(index[i], offs[i]);
    auto* p = static_cast<uint32_t*>((*r)->at(offs[i]));
    ASSERT_EQ(p[0], i);
    ASSERT_EQ(p[5], ~i);
    (*r)->free(p);
  }
  EXPECT_EQ((*r)->method_stats().live_objects, 0u);
  {
    RawSession admin(d.socket());
    grpc::ClientContext ctx;
    v1::CheckResponse check;
    ASSERT_TRUE(admin.admin->Check(&ctx, v1::CheckRequest(), &check).ok());
    for (const auto& res : check.results()) EXPECT_TRUE(res.ok()) << res.message();
  }
}

TEST(DaemonMethods, ALastRegionIsClearedByAnotherClient) {
  DaemonProcess d;
  ASSERT_TRUE(d.running()) << d.log();
  std::unique_ptr<Client> c = connect_to(d);
  ASSERT_NE(c, nullptr);
  OpenOptions o = region_options();
  o.method = Method::kLast;
  absl::StatusOr<std::unique_ptr<Region>> r = c->open("arena", o);
  ASSERT_TRUE(r.ok()) << r.status();
  for (int i = 0; i < 10000; ++i) ASSERT_NE((*r)->alloc(100), nullptr);
  EXPECT_GT((*r)->method_stats().chunks, 1u);
  {
    std::unique_ptr<Client> other = connect_to(d);
    ASSERT_NE(other, nullptr);
    auto rr = other->open("arena", region_options());
    ASSERT_TRUE(rr.ok()) << rr.status();
    EXPECT_EQ((*rr)->method(), Method::kLast);
    ASSERT_TRUE((*rr)->clear().ok());
  }
  EXPECT_EQ((*r)->method_stats().chunks, 0u);
  EXPECT_NE((*r)->alloc(100), nullptr);
}

TEST(DaemonMethods, ADebugRegionReportsInOneClientWhatAnotherAllocated) {
  DaemonProcess d;
  ASSERT_TRUE(d.running()) << d.log();
  std::unique_ptr<Client> a = connect_to(d), b = connect_to(d);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  OpenOptions o = region_options();
  o.method = Method::kDebug;
  auto ra = a->open("checked", o);
  ASSERT_TRUE(ra.ok()) << ra.status();
  auto rb = b->open("checked", region_options());
  ASSERT_TRUE(rb.ok()) << rb.status();
  EXPECT_EQ((*rb)->method(), Method::kDebug);
  char* p;
  {
    region::CallSiteScope at(heap::DebugSite{"writer.c", 41, nullptr});
    p = static_cast<char*>((*ra)->alloc(30));
  }
  ASSERT_NE(p, nullptr);
  p[30] = '!';
  void* in_b = (*rb)->at((*ra)->offset_of(p));
  ::testing::internal::CaptureStderr();
  {
    region::CallSiteScope at(heap::DebugSite{"reader.c", 7, nullptr});
    (*rb)->free(in_b);
    (*rb)->free(in_b);
  }
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(":bad byte at=30:allocated at=writer.c,41:detected at=reader.c,7:"), std::string::npos) << err;
  EXPECT_NE(err.find(":already freed:detected at=reader.c,7:"), std::string::npos) << err;
  EXPECT_EQ((*ra)->method_stats().live_objects, 0u);
}

TEST(DaemonMethods, AProfileRegionKeepsItsBooksAcrossARestart) {
  DaemonProcess d;
  ASSERT_TRUE(d.running()) << d.log();
  {
    std::unique_ptr<Client> c = connect_to(d);
    ASSERT_NE(c, nullptr);
    OpenOptions o = region_options(Discipline::kFile);
    o.method = Method::kProfile;
    auto r = c->open("counted", o);
    ASSERT_TRUE(r.ok()) << r.status();
    region::CallSiteScope at(heap::DebugSite{"before.c", 3, nullptr});
    for (int i = 0; i < 100; ++i) ASSERT_NE((*r)->alloc(64), nullptr);
  }
  EXPECT_EQ(d.stop(), 0);
  d.start();
  ASSERT_TRUE(d.running()) << d.log();
  std::unique_ptr<Client> c = connect_to(d);
  ASSERT_NE(c, nullptr);
  auto r = c->open("counted", region_options(Discipline::kFile));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->method(), Method::kProfile);
  {
    region::CallSiteScope at(heap::DebugSite{"after.c", 9, nullptr});
    (*r)->free((*r)->alloc(1000));
  }
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE((*r)->write_profile(fileno(f)).ok());
  std::rewind(f);
  std::string text(8192, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), f));
  std::fclose(f);
  EXPECT_EQ(text.find("ALLOCATION USAGE SUMMARY:n_alloc=101:n_free=1:s_alloc=7400:s_free=1000:\n"), 0u) << text;
  EXPECT_NE(text.find("file=before.c:n_alloc=100:n_free=0:s_alloc=6400:s_free=0:"), std::string::npos) << text;
  EXPECT_NE(text.find("file=after.c:n_alloc=1:n_free=1:s_alloc=1000:s_free=1000:"), std::string::npos) << text;
  EXPECT_EQ((*r)->method_stats().live_objects, 100u);
}

}  // namespace
}  // namespace memd
