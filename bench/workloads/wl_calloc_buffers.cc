// wl_calloc_buffers: wl_zeroed_buffers with calloc instead of malloc + memset
// (see zeroed_buffers.h): the allocator decides whether the memory needs
// zeroing. Single-threaded.
#include "zeroed_buffers.h"

int main(int argc, char** argv) {
  return wl::run_zeroed_buffers(argc, argv, [](size_t n) {
    void* p = std::calloc(n, 1);
    if (p == nullptr) wl::die("calloc returned null");
    return p;
  });
}
