// A client process for the daemon tests: connects to memd, opens a region
// and does one job, reporting through its exit code (0 ok, 1 wrong data,
// 2 usage, 10 + absl::StatusCode when a call fails).
//
//   test_client SOCKET REGION fill ID COUNT SIZE      allocate, publish on root board-ID
//   test_client SOCKET REGION hold ID COUNT SIZE      fill, print "ready", sleep until killed
//   test_client SOCKET REGION hold-half ID COUNT SIZE  fill, free every odd object, then as hold
//   test_client SOCKET REGION verify-half ID COUNT SIZE  verify the even objects only
//   test_client SOCKET REGION verify ID COUNT SIZE    check board-ID's objects
//   test_client SOCKET REGION free ID COUNT SIZE      verify, then free them
//   test_client SOCKET REGION publish-hold ID COUNT SIZE  reserve COUNT, publish the even ones into
//                                                     board-ID, print "ready", sleep until killed
//   test_client SOCKET REGION publish-verify ID COUNT SIZE  even ones published and intact, odd ones
//                                                     not, nothing else live (reservations freed)
//   test_client SOCKET REGION churn ID SECONDS        alloc/free/verify loop (small, large and huge objects);
//                                                     prints allocations and lease calls
//   test_client SOCKET REGION churn-huge ID SECONDS   the same with huge objects only (a lease call each)
//   test_client SOCKET REGION construct-slow          find_or_construct root "stamped", whose constructor
//                                                     prints "constructing" and waits for SOCKET.go to exist;
//                                                     prints "constructor PID" (the pid that constructed it)
//   test_client SOCKET REGION find-root               the same for an existing root, without constructing
//                                                     (and a progress line every 65,536 allocations)
//   test_client SOCKET REGION open                    open only (status in the exit code)
//   test_client SOCKET REGION exec-hold ID COUNT SIZE  allocate, then exec itself as hold (same process)
//   test_client SOCKET - sessions MAX                 open sessions until one is refused (or MAX); prints
//                                                     "sessions N", exits with the refusal's code
//   test_client SOCKET - sessions-hold MAX            the same, then prints "ready" and sleeps until killed
// Options before SOCKET: --uid N (switch user first), --file (file discipline).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "client/daemon_client.h"

namespace {

int fail(const absl::Status& s, const char* what) {
  std::fprintf(stderr, "test_client %d: %s: %s\n", getpid(), what, std::string(s.ToString()).c_str());
  return 10 + static_cast<int>(s.code());
}

unsigned char pattern(uint64_t id, uint64_t i, uint64_t j) { return static_cast<unsigned char>(id * 131 + i * 7 + j); }

void fill_object(void* p, uint64_t id, uint64_t i, size_t size) {
  auto* c = static_cast<unsigned char*>(p);
  for (size_t j = 0; j < size; ++j) c[j] = pattern(id, i, j);
}

bool object_ok(const void* p, uint64_t id, uint64_t i, size_t size) {
  auto* c = static_cast<const unsigned char*>(p);
  for (size_t j = 0; j < size; ++j) {
    if (c[j] != pattern(id, i, j)) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int a = 1;
  memd::OpenOptions open;
  open.discipline = memd::Discipline::kShm;
  open.max_bytes = size_t{256} << 20;
  open.mode = 0600;
  for (; a < argc && std::strncmp(argv[a], "--", 2) == 0; ++a) {
    if (std::strcmp(argv[a], "--uid") == 0 && a + 1 < argc) {
      uid_t uid = static_cast<uid_t>(std::atoi(argv[++a]));
      if (setgid(uid) != 0 || setuid(uid) != 0) return 2;
    } else if (std::strcmp(argv[a], "--file") == 0) {
      open.discipline = memd::Discipline::kFile;
    } else if (std::strcmp(argv[a], "--mode") == 0 && a + 1 < argc) {
      open.mode = static_cast<uint32_t>(std::strtoul(argv[++a], nullptr, 8));
    } else {
      return 2;
    }
  }
  if (argc - a < 3) return 2;
  std::string socket = argv[a], name = argv[a + 1], job = argv[a + 2];
  std::vector<uint64_t> nums;
  for (int i = a + 3; i < argc; ++i) nums.push_back(std::strtoull(argv[i], nullptr, 10));

  memd::ClientOptions co;
  co.socket = socket;
  co.program = "test_client " + job;
  if (job == "sessions" || job == "sessions-hold") {
    if (nums.size() != 1) return 2;
    std::vector<std::unique_ptr<memd::Client>> clients;
    absl::Status refused;
    while (clients.size() < nums[0]) {
      absl::StatusOr<std::unique_ptr<memd::Client>> c = memd::Client::connect(co);
      if (!c.ok()) {
        refused = c.status();
        break;
      }
      clients.push_back(std::move(*c));
    }
    std::printf("sessions %zu\n", clients.size());
    if (!refused.ok()) std::printf("refused: %s\n", std::string(refused.message()).c_str());
    std::fflush(stdout);
    if (job == "sessions-hold") {
      std::printf("ready\n");
      std::fflush(stdout);
      for (;;) pause();
    }
    return refused.ok() ? 0 : 10 + static_cast<int>(refused.code());
  }
  absl::StatusOr<std::unique_ptr<memd::Client>> client = memd::Client::connect(co);
  if (!client.ok()) return fail(client.status(), "connect");
  absl::StatusOr<std::unique_ptr<memd::Region>> region = (*client)->open(name, open);
  if (!region.ok()) return fail(region.status(), "open");
  memd::Region& r = **region;
  if (job == "open") return 0;
  if (job == "exec-hold") {
    // The lease of this image stays behind when exec replaces it (the
    // connection closes, the process lives on): the daemon must take it back.
    if (r.alloc(64) == nullptr) return 1;
    std::vector<char*> args;
    for (int i = 0; i < argc; ++i) args.push_back(argv[i]);
    args[a + 2] = const_cast<char*>("hold");
    args.push_back(nullptr);
    execv("/proc/self/exe", args.data());
    return 3;
  }

  if (job == "construct-slow" || job == "find-root") {
    // A root whose constructor waits for a file to appear (the test
    // restarts the daemon meanwhile); find-root only looks it up.
    struct Stamped {
      explicit Stamped(const std::string& go) : constructor(getpid()) {
        std::printf("constructing\n");
        std::fflush(stdout);
        while (access(go.c_str(), F_OK) != 0) usleep(10'000);
      }
      pid_t constructor;
    };
    std::string go = socket + ".go";
    Stamped* root = job == "construct-slow" ? r.find_or_construct<Stamped>("stamped", go) : r.find<Stamped>("stamped");
    if (root == nullptr) return fail(absl::NotFoundError("no root \"stamped\""), "root");
    std::printf("constructor %d\n", root->constructor);
    return 0;
  }

  if (job == "churn" || job == "churn-huge") {
    bool huge_only = job == "churn-huge";
    if (nums.size() != 2) return 2;
    uint64_t id = nums[0];
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(nums[1]);
    std::mt19937_64 rng(id);
    struct Obj {
      void* p;
      uint64_t i;
      size_t size;
    };
    std::vector<Obj> live;
    uint64_t allocs = 0;
    while (std::chrono::steady_clock::now() < until) {
      for (int k = 0; k < 1000; ++k) {
        if (live.size() < (huge_only ? 48 : 2000) && (live.empty() || rng() % 2 == 0)) {
          // Small, mid-size (one in 64) and huge (one in 256: runs of pages
          // leased one by one, up to 2.5 MiB).
          size_t size = 8 + rng() % 600;
          if (rng() % 64 == 0) size = 2000 + rng() % 30000;
          if (huge_only || rng() % 256 == 0) size = 40000 + rng() % (2500 << 10);
          void* p = r.alloc(size);
          if (p == nullptr) return fail(absl::ResourceExhaustedError("alloc failed"), "churn");
          fill_object(p, id, allocs, size);
          live.push_back({p, allocs++, size});
          // Progress for a test that kills it at a random instant: what it
          // did before the kill (a killed process prints no summary).
          if (allocs % 65536 == 0) {
            std::printf("progress allocations %lu\n", allocs);
            std::fflush(stdout);
          }
        } else {
          size_t k2 = rng() % live.size();
          if (!object_ok(live[k2].p, id, live[k2].i, live[k2].size)) {
            std::fprintf(stderr, "churn %lu: object %lu corrupt\n", id, live[k2].i);
            return 1;
          }
          r.free(live[k2].p);
          live[k2] = live.back();
          live.pop_back();
        }
      }
    }
    for (const Obj& o : live) {
      if (!object_ok(o.p, id, o.i, o.size)) return 1;
      r.free(o.p);
    }
    std::printf("allocations %lu lease_calls %lu sessions %lu\n", allocs, (*client)->lease_calls(),
                (*client)->sessions_opened());
    return 0;
  }

  if (nums.size() != 3) return 2;
  uint64_t id = nums[0], count = nums[1];
  size_t size = nums[2];
  bool created = false;
  std::string board_name = "board-" + std::to_string(id);
  auto* board = static_cast<uint64_t*>(r.root_bytes(board_name, count * sizeof(uint64_t), &created));
  if (board == nullptr) return fail(absl::ResourceExhaustedError("root"), "board");
  if (job == "publish-hold") {
    // Reserves `count` objects and publishes the even ones (failure-atomic,
    // into the board), keeps the odd ones reserved, then waits to be killed.
    for (uint64_t i = 0; i < count; ++i) {
      void* p = r.reserve(size);
      if (p == nullptr) return fail(absl::ResourceExhaustedError("reserve"), "publish-hold");
      fill_object(p, id, i, size);
      if (i % 2 == 1) continue;
      auto* link = reinterpret_cast<std::atomic<uint64_t>*>(&board[i]);
      if (absl::Status s = r.publish(p, link, r.offset_of(p) + 1); !s.ok()) return fail(s, "publish");
    }
    std::printf("ready\n");
    std::fflush(stdout);
    for (;;) pause();
  }
  if (job == "publish-verify") {
    // After the publisher died: the even objects live and intact, the odd
    // links empty, and nothing else live but the board and the publish log
    // (this attach freed the dead process's reservations).
    for (uint64_t i = 0; i < count; ++i) {
      if ((board[i] != 0) != (i % 2 == 0)) {
        std::fprintf(stderr, "board-%lu[%lu] is %s\n", id, i, board[i] != 0 ? "published" : "unpublished");
        return 1;
      }
      if (board[i] != 0 && (!object_ok(r.at(board[i] - 1), id, i, size) || r.size(r.at(board[i] - 1)) < size)) {
        std::fprintf(stderr, "board-%lu[%lu] corrupt\n", id, i);
        return 1;
      }
    }
    r.compact();  // frees orphans this attach did not reach yet
    uint64_t live = r.stat().busy_objects, want = (count + 1) / 2 + 2;
    std::printf("live %lu\n", live);
    if (live != want) {
      std::fprintf(stderr, "%lu objects live, %lu expected\n", live, want);
      return 1;
    }
    return 0;
  }
  bool half = job == "hold-half" || job == "verify-half";
  if (job == "fill" || job == "hold" || job == "hold-half") {
    for (uint64_t i = 0; i < count; ++i) {
      void* p = r.alloc(size);
      if (p == nullptr) return fail(absl::ResourceExhaustedError("alloc"), "fill");
      fill_object(p, id, i, size);
      board[i] = r.offset_of(p) + 1;  // published: 0 means none
    }
    if (half) {
      for (uint64_t i = 1; i < count; i += 2) {
        r.free(r.at(board[i] - 1));
        board[i] = 0;
      }
    }
    if (job != "fill") {
      std::printf("ready\n");
      std::fflush(stdout);
      for (;;) pause();
    }
    return 0;
  }
  if (job == "verify" || job == "verify-half" || job == "free") {
    for (uint64_t i = 0; i < count; i += half ? 2 : 1) {
      if (board[i] == 0) {
        std::fprintf(stderr, "board-%lu[%lu] unpublished\n", id, i);
        return 1;
      }
      void* p = r.at(board[i] - 1);
      if (!object_ok(p, id, i, size) || r.size(p) < size) {
        std::fprintf(stderr, "board-%lu[%lu] corrupt\n", id, i);
        return 1;
      }
    }
    if (job == "free") {
      for (uint64_t i = 0; i < count; ++i) {
        r.free(r.at(board[i] - 1));
        board[i] = 0;
      }
    }
    return 0;
  }
  return 2;
}
