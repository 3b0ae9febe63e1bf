#include "daemon/uid_bytes.h"

namespace memd::daemon {

UidBytes::Account* UidBytes::account(uid_t uid) {
  std::lock_guard<std::mutex> g(mu_);
  std::unique_ptr<Account>& a = accounts_[uid];
  if (a == nullptr) {
    a = std::make_unique<Account>();
    a->uid = uid;
    a->limit = uid == 0 ? 0 : limit_;
  }
  return a.get();
}

bool UidBytes::under_limit(uid_t uid) {
  Account* a = account(uid);
  return a->limit == 0 || a->used.load(std::memory_order_relaxed) < a->limit;
}

bool UidBytes::policy(void* account, size_t old_length, size_t new_length) {
  auto* a = static_cast<Account*>(account);
  if (new_length <= old_length) {
    remove(a, old_length - new_length);
    return true;
  }
  const uint64_t more = new_length - old_length;
  uint64_t used = a->used.load(std::memory_order_relaxed);
  do {
    if (a->limit != 0 && (used + more < used || used + more > a->limit)) {
      a->refusals.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
  } while (!a->used.compare_exchange_weak(used, used + more, std::memory_order_relaxed));
  return true;
}

void UidBytes::remove(Account* a, uint64_t bytes) {
  uint64_t used = a->used.load(std::memory_order_relaxed);
  while (!a->used.compare_exchange_weak(used, used > bytes ? used - bytes : 0, std::memory_order_relaxed)) {
  }
}

}  // namespace memd::daemon
