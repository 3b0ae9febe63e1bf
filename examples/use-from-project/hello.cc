// memd from C++ through <memd/memd.hpp> (CMake target memd::client):
// allocates and frees a thousand strings' worth of objects in the region
// NAME, keeps a typed root, and checks the region after. Errors arrive as
// exceptions carrying the C API's errno.
//
//   hello_cxx NAME   ->   allocated=1000 freed=1000 runs=N check=ok
#include <memd/memd.hpp>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

struct Runs {
  std::uint64_t count;  // zero when the root is made
};

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s REGION\n", argv[0]);
    return 2;
  }
  try {
    memd::api::Client client = memd::api::Client::connect();  // $MEMD_SOCKET
    memd::api::OpenOptions options;
    options.max_bytes = std::size_t{64} << 20;
    memd::api::Region region = client.open(argv[1], options);
    Runs* runs = region.root<Runs>("runs");
    runs->count += 1;
    std::vector<char*> objects;
    for (int i = 0; i < 1000; ++i) {
      auto* p = static_cast<char*>(region.allocate(16 + i % 200));
      std::snprintf(p, 16, "object %d", i);
      objects.push_back(p);
    }
    std::size_t freed = 0;
    for (char* p : objects) region.deallocate(p), ++freed;
    std::string problem = region.check();
    std::printf("allocated=%zu freed=%zu runs=%llu check=%s\n", objects.size(), freed,
                static_cast<unsigned long long>(runs->count), problem.empty() ? "ok" : problem.c_str());
    return problem.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hello_cxx: %s\n", e.what());
    return 1;
  }
}
