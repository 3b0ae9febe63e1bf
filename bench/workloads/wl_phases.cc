// wl_phases: a program that works in phases, as compilers and batch jobs
// do: each phase fills 96 MiB with objects of one size, reads them, and
// frees them all; the next phase uses another size. Every block a phase
// empties is free for the next one's class -- through the allocator's page
// cache, or given back to the system and faulted in again. Between two
// phases almost nothing is live, so an allocator that sizes what it keeps
// by what is live now gives everything back and refaults it every phase.
//
// Sizes cycle through small and medium classes (32 B - 1 KiB). Only the
// first 8 bytes of an object are written and checked.
#include <vector>

#include "common.h"

namespace {

constexpr size_t kPhaseBytes = size_t{96} << 20;
constexpr uint64_t kPhases = 16;  // at scale 1
constexpr size_t kSizes[] = {48, 96, 160, 256, 32, 640, 1024, 80};

}  // namespace

int main(int argc, char** argv) {
  wl::Args args = wl::parse_args(argc, argv, 1, false);
  uint64_t phases = wl::scaled(kPhases, args.scale);
  wl::Rng rng(5);
  wl::LiveBytes live;
  std::vector<void*> objects(kPhaseBytes / kSizes[4]);
  std::vector<uint64_t> tags(objects.size());
  live.add(objects.size() * (sizeof(void*) + sizeof(uint64_t)));
  uint64_t hash = 0;
  for (uint64_t phase = 0; phase < phases; ++phase) {
    size_t size = kSizes[phase % std::size(kSizes)];
    size_t n = kPhaseBytes / size;
    for (size_t i = 0; i < n; ++i) {
      tags[i] = rng.next();
      objects[i] = wl::xmalloc(size);
      std::memcpy(objects[i], &tags[i], sizeof tags[i]);
    }
    live.add(n * size);
    for (size_t i = 0; i < n; ++i) {
      if (wl::read_tag(objects[i], size) != tags[i]) wl::die("object corrupted");
      hash = wl::mix(hash, tags[i]);
      std::free(objects[i]);
    }
    live.sub(n * size);
  }
  wl::report(hash, live.peak());
  return 0;
}
