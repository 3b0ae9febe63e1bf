// The fault guard against real SIGBUS: a file mapped MAP_SHARED and then
// truncated under the mapping, as another process that can write a region's
// object may do to the daemon.
#include "disciplines/fault_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "disciplines/shared_source.h"

namespace memd::disciplines {
namespace {

constexpr size_t kPage = 4096;

std::string temp_file() {
  const char* base = getenv("TMPDIR");
  std::string path = std::string(base && *base ? base : "/tmp") + "/memd-guard-XXXXXX";
  int fd = mkstemp(path.data());
  close(fd);
  unlink(path.c_str());  // SharedSource creates it
  return path;
}

TEST(FaultGuard, AFaultInAGuardedMappingReadsZerosAndIsCounted) {
  ASSERT_TRUE(install_fault_guard().ok());
  std::string path = temp_file();
  SharedSourceOptions o;
  o.length = 8 * kPage;
  o.create = true;
  absl::StatusOr<std::unique_ptr<SharedSource>> src = SharedSource::open(DisciplineKind::kFile, path, o);
  ASSERT_TRUE(src.ok()) << src.status();
  ASSERT_TRUE((*src)->map().ok());
  char* base = (*src)->base();
  ASSERT_TRUE((*src)->commit(0, 8 * kPage));
  base[5 * kPage] = 42;
  EXPECT_TRUE((*src)->backing_status().ok());

  ASSERT_EQ(truncate(path.c_str(), 2 * kPage), 0);  // what a hostile writer does
  absl::Status short_backing = (*src)->backing_status();
  EXPECT_EQ(short_backing.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(short_backing.message().find("truncated"), std::string::npos) << short_backing;

  // Without the guard, each of these kills the process with SIGBUS.
  volatile char* lost = base + 5 * kPage;
  EXPECT_EQ(*lost, 0);
  base[6 * kPage + 10] = 1;  // goes to a private page: harmless
  EXPECT_EQ(base[6 * kPage + 10], 1);
  EXPECT_EQ(base[0], 0);  // pages still backed are untouched by the guard
  absl::Status faulted = (*src)->backing_status();
  EXPECT_NE(faulted.message().find("2 page fault(s)"), std::string::npos) << faulted;
  EXPECT_NE(faulted.message().find(std::to_string(5 * kPage)), std::string::npos) << faulted;
  src->reset();
  unlink(path.c_str());
}

TEST(FaultGuard, AFaultOutsideEveryGuardedRangeStillKills) {
  ASSERT_TRUE(install_fault_guard().ok());
  std::string path = temp_file();
  EXPECT_EXIT(
      {
        int fd = open(path.c_str(), O_RDWR | O_CREAT, 0600);
        if (ftruncate(fd, 4 * kPage) != 0) _exit(3);
        char* p = static_cast<char*>(mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
        if (ftruncate(fd, kPage) != 0) _exit(4);
        volatile char c = p[3 * kPage];  // not guarded: the program dies as it always did
        (void)c;
        _exit(0);
      },
#if defined(MEMD_SANITIZER_ADDRESS)
      // The sanitizer's own SIGBUS handler was there before the guard: it
      // reports the fault and exits.
      ::testing::ExitedWithCode(1), "BUS");
#elif defined(MEMD_SANITIZER_THREAD)
      ::testing::ExitedWithCode(66), "BUS");
#else
      ::testing::KilledBySignal(SIGBUS), "");
#endif
  unlink(path.c_str());
}

}  // namespace
}  // namespace memd::disciplines
