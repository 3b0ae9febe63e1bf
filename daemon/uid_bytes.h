// The bytes of region objects each local user owns, against the daemon's
// max-bytes-per-uid. A region's object grows online as its heap uses pages
// (region/region.h, object_bytes); the growth asks the owner's account
// first (Region::set_length_policy), so one user cannot take the whole file
// system or /dev/shm by growing regions, only their share. Root's regions
// are counted but never refused (root can stop the daemon anyway).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

namespace memd::daemon {

class UidBytes {
 public:
  // One user's total. Lives as long as the UidBytes: regions point at it.
  struct Account {
    uid_t uid = 0;
    uint64_t limit = 0;  // 0: none
    std::atomic<uint64_t> used{0};
    std::atomic<uint64_t> refusals{0};  // growths refused so far
  };

  explicit UidBytes(uint64_t limit_per_uid) : limit_(limit_per_uid) {}

  // `uid`'s account, made on first use.
  Account* account(uid_t uid);
  // Whether `uid` may create another region (its total is under the limit).
  bool under_limit(uid_t uid);

  // Region::LengthPolicy over an Account: a growth is refused if it would
  // take the account past its limit; a shrink gives the bytes back.
  static bool policy(void* account, size_t old_length, size_t new_length);
  // A region joins or leaves the account with the length it has.
  static void add(Account* a, uint64_t bytes) { a->used.fetch_add(bytes, std::memory_order_relaxed); }
  static void remove(Account* a, uint64_t bytes);

 private:
  const uint64_t limit_;
  std::mutex mu_;
  std::map<uid_t, std::unique_ptr<Account>> accounts_;
};

}  // namespace memd::daemon
