// wl_lifetime_mix: a large long-lived data set (100k objects, 16 B–4 KiB)
// beside a churn of short-lived objects, many of them medium and large
// (504 B–32 KiB). The long-lived set is slowly replaced while the churn runs,
// so long-lived survivors end up interleaved with short-lived garbage — the
// classic way heaps fragment (Vam's "long-lived vs short-lived" mix).
// Single-threaded.
#include <vector>

#include "common.h"

namespace {

constexpr size_t kLongLived = 100'000;
constexpr size_t kShortWindow = 512;     // short-lived objects alive at once
constexpr uint64_t kOps = 2'400'000;     // short-lived allocations, at scale 1
constexpr uint64_t kTurnoverEvery = 8;   // replace one long-lived object per N ops

struct Obj {
  void* ptr = nullptr;
  uint32_t size = 0;
  uint64_t tag = 0;
};

class Pool {
 public:
  Pool(size_t slots, wl::LiveBytes& live) : objs_(slots), live_(live) { live_.add(slots * sizeof(Obj)); }

  // Replaces slot i with a fresh object; returns the old object's tag.
  uint64_t replace(size_t i, size_t size, uint64_t tag) {
    uint64_t old = release(i);
    Obj& o = objs_[i];
    o.size = static_cast<uint32_t>(size);
    o.tag = tag;
    o.ptr = wl::xmalloc(size);
    wl::fill(o.ptr, size, tag);
    live_.add(size);
    return old;
  }

  uint64_t release(size_t i) {
    Obj& o = objs_[i];
    if (o.ptr == nullptr) return 0;
    if (wl::read_tag(o.ptr, o.size) != wl::expected_tag(o.tag, o.size)) wl::die("object corrupted");
    std::free(o.ptr);
    live_.sub(o.size);
    o.ptr = nullptr;
    return o.tag;
  }

  size_t slots() const { return objs_.size(); }

 private:
  std::vector<Obj> objs_;
  wl::LiveBytes& live_;
};

// Short-lived sizes: half small, half in the medium/large band where
// allocators switch strategies (size-class pages vs. spans vs. mmap).
size_t short_size(wl::Rng& rng) {
  return rng.below(2) == 0 ? rng.log_uniform(16, 504) : rng.log_uniform(504, 32 * 1024);
}

}  // namespace

int main(int argc, char** argv) {
  wl::Args args = wl::parse_args(argc, argv, 1, false);
  uint64_t ops = wl::scaled(kOps, args.scale);

  wl::Rng rng(4242);
  wl::LiveBytes live;
  uint64_t h = 0;
  {
    Pool long_lived(kLongLived, live);
    Pool short_lived(kShortWindow, live);
    for (size_t i = 0; i < kLongLived; ++i) long_lived.replace(i, rng.log_uniform(16, 4096), rng.next());

    for (uint64_t op = 0; op < ops; ++op) {
      h = wl::mix(h, short_lived.replace(rng.below(kShortWindow), short_size(rng), rng.next()));
      if (op % kTurnoverEvery == 0)
        h = wl::mix(h, long_lived.replace(rng.below(kLongLived), rng.log_uniform(16, 4096), rng.next()));
    }
    for (size_t i = 0; i < kLongLived; ++i) h = wl::mix(h, long_lived.release(i));
    for (size_t i = 0; i < kShortWindow; ++i) h = wl::mix(h, short_lived.release(i));
  }
  wl::report(h, live.peak());
  return 0;
}
