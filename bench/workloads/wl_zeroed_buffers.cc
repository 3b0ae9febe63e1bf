// wl_zeroed_buffers: 20 live 5–25 MiB buffers, one replaced at random on each
// step, each new one zeroed with malloc + memset of the whole buffer (see
// zeroed_buffers.h). Single-threaded.
#include "zeroed_buffers.h"

int main(int argc, char** argv) {
  return wl::run_zeroed_buffers(argc, argv, [](size_t n) {
    void* p = wl::opaque(wl::xmalloc(n));
    std::memset(p, 0, n);
    return p;
  });
}
