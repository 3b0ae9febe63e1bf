// A plain mutex/condvar bounded queue. Deliberately boring: the queue must not
// allocate per item (its ring is allocated once), so every allocation the
// producer/consumer workload makes is one the workload itself asked for.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <vector>

template <class T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : ring_(capacity) {}

  void push(T item) {
    std::unique_lock lock(mu_);
    not_full_.wait(lock, [&] { return count_ < ring_.size(); });
    ring_[(head_ + count_) % ring_.size()] = item;
    ++count_;
    not_empty_.notify_one();
  }

  T pop() {
    std::unique_lock lock(mu_);
    not_empty_.wait(lock, [&] { return count_ > 0; });
    T item = ring_[head_];
    head_ = (head_ + 1) % ring_.size();
    --count_;
    not_full_.notify_one();
    return item;
  }

 private:
  std::mutex mu_;
  std::condition_variable not_full_, not_empty_;
  std::vector<T> ring_;
  size_t head_ = 0;
  size_t count_ = 0;
};
