// The C API for the daemon (memd_client.h) through libmemd.so itself, the
// library users link, against a real memd: regions opened, used and found
// again across connections and a daemon restart, and every bad argument
// or missing thing a NULL with its errno.
#include "client/memd_client.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "daemon_process.h"

namespace memd {
namespace {

class CClientApiTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(d_.running()); }
  memd_client* connect() {
    memd_client* c = memd_connect(d_.socket().c_str());
    EXPECT_NE(c, nullptr) << std::strerror(errno);
    return c;
  }
  testing::DaemonProcess d_;
};

TEST_F(CClientApiTest, ARegionsRootsOutliveTheConnectionAndTheDaemon) {
  memd_open_options o;
  memd_open_options_init(&o);
  o.discipline = MEMD_FILE;
  o.max_bytes = size_t{32} << 20;
  for (int round = 1; round <= 3; ++round) {
    SCOPED_TRACE(round);
    memd_client* c = connect();
    ASSERT_NE(c, nullptr);
    memd_region* r = memd_open(c, "c-api", &o);
    ASSERT_NE(r, nullptr) << std::strerror(errno);
    EXPECT_EQ(memd_region_method(r), MEMD_BEST);
    int created = -1;
    auto* count = static_cast<uint64_t*>(memd_region_root(r, "count", sizeof(uint64_t), &created));
    ASSERT_NE(count, nullptr) << std::strerror(errno);
    EXPECT_EQ(created, round == 1 ? 1 : 0);
    EXPECT_EQ(*count, static_cast<uint64_t>(round - 1));
    *count += 1;
    void* objects[64];
    ASSERT_EQ(memd_region_alloc_batch(r, 64, 100, objects), 64u);
    memd_region_free_batch(r, objects, 64);
    char message[256] = "";
    EXPECT_EQ(memd_region_check(r, message, sizeof message), 0) << message;
    ASSERT_EQ(memd_region_persist(r, count, sizeof *count), 0) << std::strerror(errno);
    memd_region_close(r);
    memd_disconnect(c);
    if (round == 2) {  // the file region's root survives a restart
      ASSERT_EQ(d_.stop(), 0);
      d_.start();
      ASSERT_TRUE(d_.running());
    }
  }
}

TEST_F(CClientApiTest, OptionsSayWhatToCreateAndWhatToRefuse) {
  memd_client* c = connect();
  ASSERT_NE(c, nullptr);
  memd_open_options o;
  memd_open_options_init(&o);
  o.create = 0;
  errno = 0;
  EXPECT_EQ(memd_open(c, "missing", &o), nullptr);
  EXPECT_EQ(errno, ENOENT);

  memd_open_options_init(&o);
  o.method = MEMD_POOL;
  o.max_bytes = size_t{16} << 20;
  memd_region* pool = memd_open(c, "pooled", &o);
  ASSERT_NE(pool, nullptr) << std::strerror(errno);
  EXPECT_EQ(memd_region_method(pool), MEMD_POOL);
  memd_region_close(pool);

  o.exclusive = 1;
  errno = 0;
  EXPECT_EQ(memd_open(c, "pooled", &o), nullptr);
  EXPECT_EQ(errno, EEXIST);
  memd_open_options_init(&o);
  o.method = MEMD_LAST;  // not the method it was made with
  errno = 0;
  EXPECT_EQ(memd_open(c, "pooled", &o), nullptr);
  EXPECT_EQ(errno, EPROTO);
  memd_region* any = memd_open(c, "pooled", nullptr);  // defaults: whatever method it has
  ASSERT_NE(any, nullptr) << std::strerror(errno);
  EXPECT_EQ(memd_region_method(any), MEMD_POOL);
  memd_region_close(any);
  memd_disconnect(c);
}

TEST_F(CClientApiTest, BadArgumentsAreEinvalAndNoDaemonIsEconnrefused) {
  memd_client* c = connect();
  ASSERT_NE(c, nullptr);
  memd_open_options o;
  auto refused = [&](memd_client* client, const char* name, const memd_open_options* options) {
    errno = 0;
    memd_region* r = memd_open(client, name, options);
    int e = errno;
    if (r != nullptr) memd_region_close(r);
    return r == nullptr && e == EINVAL;
  };
  EXPECT_TRUE(refused(nullptr, "x", nullptr));
  EXPECT_TRUE(refused(c, nullptr, nullptr));
  EXPECT_TRUE(refused(c, "../x", nullptr));
  memd_open_options_init(&o);
  o.discipline = 99;
  EXPECT_TRUE(refused(c, "x", &o));
  o.discipline = -1;
  EXPECT_TRUE(refused(c, "x", &o));
  memd_open_options_init(&o);
  o.method = 42;
  EXPECT_TRUE(refused(c, "x", &o));
  memd_open_options_init(&o);
  o.reserved[3] = 1;  // not zero: a field this library does not know
  EXPECT_TRUE(refused(c, "x", &o));
  memd_open_options_init(nullptr);  // harmless
  memd_disconnect(c);
  memd_disconnect(nullptr);  // harmless, as free(NULL)

  std::string nowhere = d_.socket() + ".none";
  errno = 0;
  EXPECT_EQ(memd_connect(nowhere.c_str()), nullptr);
  EXPECT_EQ(errno, ECONNREFUSED);
}

TEST_F(CClientApiTest, TheVersionIsTheProjects) { EXPECT_STREQ(memd_version(), MEMD_PROJECT_VERSION); }

}  // namespace
}  // namespace memd
