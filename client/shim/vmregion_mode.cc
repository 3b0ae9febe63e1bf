// Vmalloc's Vmregion under the shim (client/shim/vmregion_link.h): the
// shim's heap is redirected to calls that read Vmregion each time. While it
// is Vmheap, a call goes on to the process heap (the shim's own malloc, made
// private for the call so that it does not come back here); else to the
// region through vmalloc.h. A free, realloc or size of a block goes to the
// region that holds it, whatever Vmregion says by then.
#include <malloc.h>

#include <cstdlib>
#include <cstring>

#include "client/shim/daemon_mode.h"
#include "client/shim/debug_mode.h"
#include "client/shim/vmregion_link.h"

#define MEMD_EXPORT extern "C" __attribute__((visibility("default")))

namespace memd::client::shim {
namespace {

memd_vmregion_calls vm_calls;
memd_daemon_heap vm_heap;

// Nested allocations (the region's own, or the process heap's) stay in the
// process heap.
struct Private {
  Private() { ++tl_private; }
  ~Private() { --tl_private; }
};

void* current() { return __atomic_load_n(const_cast<void**>(vm_calls.current), __ATOMIC_ACQUIRE); }

// A region that names sites (debug, profile, traced) is given the
// program's: the first return address outside this library, or what the
// program recorded with memd_debug.h.
void give_site(void* vm) {
  if (vm_calls.wants_site(vm) == 0) return;
  heap::DebugSite s = program_call_site();
  vm_calls.site(s.file, static_cast<int>(s.line), s.pc);
}

void* vm_alloc(size_t size) {
  Private p;
  void* vm = current();
  if (vm == vm_calls.heap) return std::malloc(size);
  give_site(vm);
  return vm_calls.alloc(vm, size, 0);
}

void* vm_alloc_aligned(size_t size, size_t align) {
  Private p;
  void* vm = current();
  if (vm != vm_calls.heap) return give_site(vm), vm_calls.alloc(vm, size, align);
  void* out = nullptr;
  return posix_memalign(&out, align, size) == 0 ? out : nullptr;
}

void* vm_alloc_zeroed(size_t size) {
  Private p;
  void* vm = current();
  if (vm == vm_calls.heap) return std::calloc(1, size);
  give_site(vm);
  void* out = vm_calls.alloc(vm, size, 0);
  if (out != nullptr) std::memset(out, 0, size);
  return out;
}

void* vm_resize(void* p, size_t size) {
  Private g;
  void* vm = vm_calls.region_of(p);
  if (vm == nullptr) return nullptr;
  give_site(vm);
  return vm_calls.resize(vm, p, size);
}

int vm_free(void* p) {
  Private g;
  void* vm = vm_calls.region_of(p);
  if (vm == nullptr) return 0;
  give_site(vm);
  vm_calls.free(vm, p);
  return 1;
}

size_t vm_usable_size(const void* p) {
  Private g;
  void* vm = vm_calls.region_of(p);
  return vm != nullptr ? vm_calls.size(vm, p) : 0;
}

int vm_contains(const void* p) {
  Private g;
  return vm_calls.region_of(p) != nullptr ? 1 : 0;
}

void vm_trim() {}
int vm_fork_child() { return 0; }

}  // namespace
}  // namespace memd::client::shim

MEMD_EXPORT int memd_shim_use_vmregion(const memd_vmregion_calls* calls) {
  using namespace memd::client::shim;
  if (calls == nullptr || redirect_heap.load(std::memory_order_acquire) != nullptr) return -1;
  vm_calls = *calls;
  vm_heap = memd_daemon_heap{vm_alloc, vm_alloc_aligned, vm_alloc_zeroed, vm_resize, vm_free, vm_usable_size,
                             vm_contains, vm_trim, vm_fork_child, nullptr, nullptr, nullptr};
  const memd_daemon_heap* none = nullptr;
  if (!redirect_heap.compare_exchange_strong(none, &vm_heap, std::memory_order_acq_rel)) return -1;
  alloc_detour.store(true, std::memory_order_release);
  return 0;
}
