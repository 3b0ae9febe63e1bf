// The C API from C++, with its handles owned by std::unique_ptr: allocates
// and frees a thousand strings' worth of objects in the region NAME and
// checks the region after.
//
//   hello_cxx NAME   ->   allocated=1000 freed=1000 check=ok
#include <memd/memd_client.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

namespace {

struct Disconnect {
  void operator()(memd_client* c) const { memd_disconnect(c); }
};
struct Close {
  void operator()(memd_region* r) const { memd_region_close(r); }
};

int fail(const char* what) {
  std::fprintf(stderr, "%s: %s\n", what, std::strerror(errno));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s REGION\n", argv[0]);
    return 2;
  }
  std::unique_ptr<memd_client, Disconnect> client(memd_connect(nullptr));
  if (!client) return fail("memd_connect");
  memd_open_options options;
  memd_open_options_init(&options);
  options.max_bytes = size_t{64} << 20;
  std::unique_ptr<memd_region, Close> region(memd_open(client.get(), argv[1], &options));
  if (!region) return fail("memd_open");
  std::vector<char*> objects;
  for (int i = 0; i < 1000; ++i) {
    auto* p = static_cast<char*>(memd_region_alloc(region.get(), 16 + i % 200));
    if (p == nullptr) return fail("memd_region_alloc");
    std::snprintf(p, 16, "object %d", i);
    objects.push_back(p);
  }
  size_t freed = 0;
  for (char* p : objects) memd_region_free(region.get(), p), ++freed;
  char message[256] = "";
  bool ok = memd_region_check(region.get(), message, sizeof(message)) == 0;
  std::printf("allocated=%zu freed=%zu check=%s %s\n", objects.size(), freed, ok ? "ok" : "FAILED", message);
  return ok ? 0 : 1;
}
