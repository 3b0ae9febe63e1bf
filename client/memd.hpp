// memd for C++ programs: a thin header over libmemd's C API (memd_client.h,
// memd_region.h), for programs that link the installed library
// (find_package(memd) -> memd::client, or pkg-config memd). It adds only
// what C++ expects: handles that close themselves, errors as exceptions
// (std::system_error carrying the C API's errno; std::bad_alloc when memory
// runs out), and typed objects and roots.
//
//   memd::api::Client client = memd::api::Client::connect();
//   memd::api::OpenOptions options;
//   options.max_bytes = 64 << 20;
//   memd::api::Region jobs = client.open("jobs", options);
//   auto* count = jobs.root<long>("count");          // zeroed when made
//   auto* job = jobs.make<Job>(42);                   // constructed in the region
//   jobs.destroy(job);
//
// A Region keeps its Client's connection open until the Region closes
// (the C API requires every region closed before memd_disconnect).
// Pointers into a region are this process's; another process finds an
// object through its offset (offset_of, at) or a named root.
#ifndef MEMD_MEMD_HPP_
#define MEMD_MEMD_HPP_

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

#include "memd_client.h"
#include "memd_region.h"

namespace memd::api {

enum class Discipline { kAny = 0, kShm = MEMD_SHM, kFile = MEMD_FILE, kPmem = MEMD_PMEM };
enum class Method {
  kAny = MEMD_METHOD_ANY,
  kBest = MEMD_BEST,
  kPool = MEMD_POOL,
  kLast = MEMD_LAST,
  kDebug = MEMD_DEBUG,
  kProfile = MEMD_PROFILE,
};

// memd_open_options in C++ terms. Opening: kAny discipline accepts whatever
// the region is, and creating then makes shm.
struct OpenOptions {
  Discipline discipline = Discipline::kAny;
  Method method = Method::kAny;
  bool create = true;
  bool exclusive = false;  // with create: the region must not exist yet
  bool read_only = false;
  unsigned mode = 0;       // creating: permission bits (0: 0600)
  std::size_t max_bytes = 0;     // creating: its fixed size (0: the daemon's default)
  std::uint32_t max_clients = 0; // creating: processes attached at once (0: default)
  std::uint32_t max_threads = 0; // creating: thread heaps of all processes (0: default)
};

namespace detail {

[[noreturn]] inline void throw_errno(const std::string& what) {
  int e = errno;
  if (e == ENOMEM) throw std::bad_alloc();
  throw std::system_error(e != 0 ? e : EIO, std::generic_category(), what);
}

struct Disconnect {
  void operator()(memd_client* c) const noexcept { memd_disconnect(c); }
};

}  // namespace detail

class Region {
 public:
  Region() = default;
  Region(Region&& other) noexcept
      : connection_(std::move(other.connection_)), region_(std::exchange(other.region_, nullptr)) {}
  Region& operator=(Region&& other) noexcept {
    if (this != &other) {
      close();
      connection_ = std::move(other.connection_);
      region_ = std::exchange(other.region_, nullptr);
    }
    return *this;
  }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region() { close(); }

  // Closes this process's use of the region; its objects stay.
  void close() noexcept {
    if (region_ != nullptr) memd_region_close(std::exchange(region_, nullptr));
    connection_.reset();
  }
  explicit operator bool() const noexcept { return region_ != nullptr; }
  memd_region* get() const noexcept { return region_; }  // for the C API

  void* allocate(std::size_t bytes) {
    void* p = memd_region_alloc(checked(), bytes);
    if (p == nullptr) detail::throw_errno("memd_region_alloc");
    return p;
  }
  void* allocate_zeroed(std::size_t count, std::size_t bytes) {
    void* p = memd_region_calloc(checked(), count, bytes);
    if (p == nullptr) detail::throw_errno("memd_region_calloc");
    return p;
  }
  // Any process attached to the region may free any of its objects.
  void deallocate(void* p) noexcept { memd_region_free(region_, p); }
  std::size_t size_of(const void* p) const { return memd_region_size(checked(), p); }

  template <class T, class... Args>
  T* make(Args&&... args) {
    static_assert(alignof(T) <= alignof(std::max_align_t), "memd aligns objects to max_align_t");
    void* p = allocate(sizeof(T));
    try {
      return ::new (p) T(std::forward<Args>(args)...);
    } catch (...) {
      deallocate(p);
      throw;
    }
  }
  template <class T>
  void destroy(T* object) noexcept {
    if (object == nullptr) return;
    object->~T();
    deallocate(object);
  }

  // The named root: found, or made zeroed (`*created` says which). T must be
  // a type whose zero bytes are a valid value (an int, a struct of them).
  template <class T>
  T* root(const std::string& name, bool* created = nullptr) {
    static_assert(std::is_trivially_copyable_v<T>, "a root is bytes shared between processes");
    return static_cast<T*>(root_bytes(name, sizeof(T), created));
  }
  void* root_bytes(const std::string& name, std::size_t bytes, bool* created = nullptr) {
    int made = 0;
    void* p = memd_region_root(checked(), name.c_str(), bytes, &made);
    if (p == nullptr) detail::throw_errno("memd_region_root \"" + name + "\"");
    if (created != nullptr) *created = made != 0;
    return p;
  }
  // The named root, or nullptr if the region has none by that name.
  template <class T = void>
  T* find(const std::string& name) const {
    return static_cast<T*>(memd_region_find(checked(), name.c_str()));
  }

  // Offsets name an object the same way in every process.
  std::uint64_t offset_of(const void* p) const { return memd_region_offset(checked(), p); }
  template <class T = void>
  T* at(std::uint64_t offset) const {
    return static_cast<T*>(memd_region_at(checked(), offset));
  }

  // File and pmem regions: make bytes durable, or the whole region.
  void persist(const void* p, std::size_t bytes) {
    if (memd_region_persist(checked(), p, bytes) != 0) detail::throw_errno("memd_region_persist");
  }
  void checkpoint() {
    if (memd_region_checkpoint(checked()) != 0) detail::throw_errno("memd_region_checkpoint");
  }
  // Checks the region's heap: an empty string if every invariant holds,
  // else what is wrong.
  std::string check() const {
    char message[512] = {};
    return memd_region_check(checked(), message, sizeof message) == 0 ? std::string() : std::string(message);
  }

 private:
  friend class Client;
  Region(std::shared_ptr<memd_client> connection, memd_region* region)
      : connection_(std::move(connection)), region_(region) {}
  memd_region* checked() const {
    if (region_ == nullptr) throw std::system_error(EBADF, std::generic_category(), "memd: the Region is closed");
    return region_;
  }

  std::shared_ptr<memd_client> connection_;  // released after the region closes
  memd_region* region_ = nullptr;
};

class Client {
 public:
  // Connects to memd at `socket` ("" : $MEMD_SOCKET, else the default rule).
  static Client connect(const std::string& socket = "") {
    memd_client* c = memd_connect(socket.empty() ? nullptr : socket.c_str());
    if (c == nullptr) detail::throw_errno("memd_connect" + (socket.empty() ? std::string() : " " + socket));
    return Client(std::shared_ptr<memd_client>(c, detail::Disconnect()));
  }

  // Opens (and by default creates) the region `name`.
  Region open(const std::string& name, const OpenOptions& options = {}) {
    memd_open_options o;
    memd_open_options_init(&o);
    o.any_discipline = options.discipline == Discipline::kAny;
    if (options.discipline != Discipline::kAny) o.discipline = static_cast<int>(options.discipline);
    o.method = static_cast<int>(options.method);
    o.create = options.create;
    o.exclusive = options.exclusive;
    o.read_only = options.read_only;
    o.mode = options.mode;
    o.max_bytes = options.max_bytes;
    o.max_clients = options.max_clients;
    o.max_threads = options.max_threads;
    memd_region* r = memd_open(connection_.get(), name.c_str(), &o);
    if (r == nullptr) detail::throw_errno("memd_open \"" + name + "\"");
    return Region(connection_, r);
  }

  memd_client* get() const noexcept { return connection_.get(); }  // for the C API

 private:
  explicit Client(std::shared_ptr<memd_client> connection) : connection_(std::move(connection)) {}
  std::shared_ptr<memd_client> connection_;
};

// The version of the library this program runs with ("0.1.0").
inline std::string version() { return memd_version(); }

}  // namespace memd::api

#endif  // MEMD_MEMD_HPP_
