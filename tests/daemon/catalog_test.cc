// The daemon's catalog on disk: a record it did not write (edited, corrupt,
// truncated) is refused whole, never turned into a region of an unknown
// discipline or method; the records beside it still load.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "daemon/catalog.h"

namespace memd::daemon {
namespace {

class CatalogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/memd-catalog-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    catalog_ = std::make_unique<Catalog>(dir_);
    ASSERT_TRUE(catalog_->init().ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A record written by hand, as an attacker with the data directory or a
  // damaged disk would leave one.
  void write_record(const std::string& name, const std::string& body) {
    std::ofstream(dir_ + "/catalog/" + name + ".region.conf") << body;  // the layout daemon/catalog.cc writes
  }

  std::string dir_;
  std::unique_ptr<Catalog> catalog_;
};

TEST_F(CatalogTest, RecordsNamingNoDisciplineOrMethodAreRefused) {
  CatalogRecord good;
  good.name = "good";
  good.object = "memd.good";
  good.discipline = Discipline::kFile;
  good.max_bytes = 1 << 20;
  ASSERT_TRUE(catalog_->save(good).ok());
  write_record("disc9", "name = disc9\nobject = memd.disc9\ndiscipline = 9\nmethod = 1\n");
  write_record("disc0", "name = disc0\nobject = memd.disc0\ndiscipline = 0\nmethod = 1\n");
  write_record("method7", "name = method7\nobject = memd.method7\ndiscipline = 1\nmethod = 7\n");
  write_record("huge", "name = huge\nobject = memd.huge\ndiscipline = 4294967297\nmethod = 1\n");
  write_record("cut", "name = cut\nobj");

  absl::StatusOr<std::vector<CatalogRecord>> all = catalog_->load();
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].name, "good");
  EXPECT_EQ((*all)[0].discipline, Discipline::kFile);
  EXPECT_EQ((*all)[0].method, Method::kBest);
}

}  // namespace
}  // namespace memd::daemon
