// Fuzz target: opening a region whose backing file holds anything at all.
//
// A region's backing belongs to the user who created it, so whatever that
// user wrote into it is what the daemon finds at its next start. Opening
// must then either refuse the region with a status, or recover it into one
// that passes check() and serves allocations; it must never crash, hang or
// read outside the mapping.
//
// The input is a list of patches over one of two real regions made at start
// (one closed cleanly, one left as its owner's crash leaves it), plus a new
// length for the file:
//   byte 0      flags: bit 0 the crashed image, bit 1 truncate
//   bytes 1..4  the new length (bit 1), modulo twice the image's
//   then        patches: u32 where, u8 length, bytes. `where`'s top bits
//               choose the part it lands in: the header, the tables, or
//               anywhere in the file.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "region/region.h"
#include "fuzz_input.h"
#include "heap/layout.h"

namespace {

using memd::Discipline;
using memd::Region;
using memd::fuzz::FuzzInput;

struct Images {
  std::string dir;
  std::string clean, crashed;  // whole files
  uint64_t tables_end = 0;     // data_offset: header and tables before it
};
Images* images = nullptr;

std::string read_file(const std::string& path) {
  std::string s(std::filesystem::file_size(path), '\0');
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || pread(fd, s.data(), s.size(), 0) != static_cast<ssize_t>(s.size())) {
    memd::fuzz::fail("cannot read " + path);
  }
  close(fd);
  return s;
}

// A region with objects of every kind in it, roots, and freed objects.
void populate(Region& r) {
  std::vector<void*> objects;
  for (size_t size : {16, 48, 200, 496, 2000, 40000, 300000}) {
    for (int i = 0; i < 6; ++i) objects.push_back(r.alloc(size));
  }
  for (size_t i = 0; i < objects.size(); i += 3) r.free(objects[i]);
  bool created = false;
  r.root_bytes("config", 64, &created);
  r.root_bytes("table", 4096, &created);
}

void make_images() {
  images = new Images();
  char tmpl[] = "/tmp/memd-fuzz-region-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) memd::fuzz::fail("mkdtemp");
  images->dir = tmpl;
  memd::RegionOptions options;
  options.discipline = Discipline::kFile;
  options.max_bytes = size_t{2} << 20;
  options.max_threads = 8;
  options.max_clients = 4;
  options.max_roots = 8;
  std::string clean = images->dir + "/clean";
  {
    auto r = Region::create(clean, options);
    if (!r.ok()) memd::fuzz::fail(std::string(r.status().message()));
    populate(**r);
    // The crashed image: the file as it is while its owner runs, taken
    // before the owner closes it (what kill -9 would leave).
    images->crashed = read_file(clean);
  }
  images->clean = read_file(clean);
  images->tables_end = reinterpret_cast<const memd::heap::RegionHeader*>(images->clean.data())->data_offset;
  std::filesystem::remove(clean);
}

void write_file(const std::string& path, const std::string& bytes, uint64_t length) {
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) memd::fuzz::fail("cannot create " + path);
  uint64_t n = std::min<uint64_t>(length, bytes.size());
  if (pwrite(fd, bytes.data(), n, 0) != static_cast<ssize_t>(n) || ftruncate(fd, static_cast<off_t>(length)) != 0) {
    memd::fuzz::fail("cannot write " + path);
  }
  close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  make_images();
  std::atexit([] {
    std::error_code ec;
    std::filesystem::remove_all(images->dir, ec);
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  uint8_t flags = in.take<uint8_t>();
  uint32_t length_word = in.take<uint32_t>();
  std::string image = flags & 1 ? images->crashed : images->clean;
  uint64_t length = image.size();
  if (flags & 2) length = length_word % (2 * image.size());
  while (!in.empty()) {
    uint32_t where = in.take<uint32_t>();
    std::string bytes = in.chunk();
    uint64_t span = (where >> 30) == 0   ? sizeof(memd::heap::RegionHeader)
                    : (where >> 30) == 3 ? image.size()
                                         : images->tables_end;
    uint64_t at = (where & 0x3fffffff) % span;
    size_t n = std::min<uint64_t>(bytes.size(), image.size() - at);
    image.replace(at, n, bytes, 0, n);
  }
  std::string path = images->dir + "/region";
  write_file(path, image, length);

  auto opened = Region::open(path, Discipline::kFile);
  if (opened.ok()) {
    Region& r = **opened;
    if (r.check().ok()) {
      // Recovered into a region that checks: it must serve, and stay whole.
      std::vector<void*> objects;
      for (size_t s : {24, 100, 3000, 70000}) objects.push_back(r.alloc(s));
      for (void* p : objects) {
        if (p != nullptr) r.free(p);
      }
      r.compact();
      if (absl::Status s = r.check(); !s.ok()) {
        memd::fuzz::fail("a region that checked after open fails after use: " + std::string(s.message()));
      }
    }
  }
  opened = absl::UnknownError("closed");  // closes the region before its file goes
  std::filesystem::remove(path);
  return 0;
}
