#include "client/shim/bootstrap_heap.h"

#include <atomic>
#include <cerrno>
#include <cstdint>

namespace memd::client {
namespace {

constexpr size_t kBytes = size_t{1} << 20;
constexpr size_t kHeader = 16;  // holds the size, keeps 16-byte alignment

alignas(4096) char buffer[kBytes];
constinit std::atomic<size_t> top{0};

}  // namespace

void* bootstrap_alloc(size_t size, size_t align) {
  if (align < kHeader) align = kHeader;
  if (size > kBytes) {
    errno = ENOMEM;
    return nullptr;
  }
  size_t old = top.load(std::memory_order_relaxed);
  for (;;) {
    size_t start = (old + kHeader + align - 1) & ~(align - 1);
    size_t end = start + ((size + kHeader - 1) & ~(kHeader - 1));
    if (end > kBytes) {
      errno = ENOMEM;
      return nullptr;
    }
    if (top.compare_exchange_weak(old, end, std::memory_order_relaxed)) {
      *reinterpret_cast<size_t*>(buffer + start - kHeader) = size;
      return buffer + start;
    }
  }
}

bool bootstrap_contains(const void* p) {
  return reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(buffer) < kBytes;
}

size_t bootstrap_size(const void* p) {
  return *reinterpret_cast<const size_t*>(static_cast<const char*>(p) - kHeader);
}

}  // namespace memd::client
