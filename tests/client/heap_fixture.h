// A fresh memd::Heap per test, with error reports quiet (tests count them
// through region::error_count instead) and a check of its invariants.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <memory>

#include "client/heap.h"

namespace memd::testing {

class HeapFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("MEMD_QUIET", "1", 1);
    auto h = Heap::create();
    ASSERT_TRUE(h.ok()) << h.status();
    heap_ = std::move(*h);
  }
  void ExpectConsistent() {
    absl::Status s = heap_->check();
    EXPECT_TRUE(s.ok()) << s;
  }
  std::unique_ptr<Heap> heap_;
};

}  // namespace memd::testing
