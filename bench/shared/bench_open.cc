// bench_open: what it costs to start using a persistent heap — create an
// empty one, open one that holds many objects, attach a second process to
// it, and open one whose last user crashed (recovery) — for memd's file
// regions and the two persistent heaps users compare it with:
//   memd         memd::Region, file discipline (Region::create / open /
//                attach through the owner's socket)
//   boost        Boost.Interprocess managed_mapped_file (create_only /
//                open_only; it has no recovery: a crash inside the segment
//                manager leaves it as it was)
//   pmemobj      PMDK libpmemobj (pmemobj_create / pmemobj_open, whose open
//                replays the lanes of a pool closed by a crash)
//
// One invocation runs one phase on one heap and prints one line:
//   <heap> <phase> <seconds> <extra>
// Phases:
//   create   time to create an empty heap of --bytes and have it ready to
//            allocate (Metall reports 44 ms for this with its defaults)
//   fill     (setup, timed for the record) create a heap of --bytes and
//            allocate --objects objects of 64-512 B, their offsets in a root
//            array, then close it cleanly
//   open     time to open the filled heap and find its root (clean close
//            before)
//   attach   time for a second process to open the heap while its first
//            user has it open (memd: Region::attach through the owner's
//            socket; boost and pmemobj: an open of the same file, which
//            pmemobj refuses while the pool is open: not run)
//   crash    (setup) open the filled heap, free and allocate 1% of the
//            objects, and _exit without closing
//   recover  time to open the heap the crash left, and find its root;
//            <extra> is the bytes of objects it holds
//   checkpoint       open the heap, write one byte into 1% of its objects,
//                    and time the checkpoint that makes them durable (memd:
//                    Region::checkpoint; boost: flush; pmemobj has none:
//                    every allocation is durable at once)
//   checkpoint-idle  the same with nothing written since the last one
// The runner (run_open.py) runs every heap in every round and pairs the
// ratios per round.
#include <libpmemobj.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/interprocess/managed_mapped_file.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "region/region.h"

namespace {

namespace bip = boost::interprocess;
using Clock = std::chrono::steady_clock;

struct Config {
  std::string heap;
  std::string phase;
  std::string path;
  size_t bytes = size_t{1} << 30;
  uint64_t objects = 1'000'000;
};

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "bench_open: %s\n", what.c_str());
  std::exit(1);
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

size_t object_size(std::mt19937& rng) { return 64 + rng() % 449; }

void print(const Config& c, double seconds, uint64_t extra = 0) {
  std::printf("%s %s %.6f %llu\n", c.heap.c_str(), c.phase.c_str(), seconds, static_cast<unsigned long long>(extra));
}

// The root every heap keeps: the offset (from the heap's own base) of every
// object, so that an open can reach them all.
constexpr const char* kRootName = "objects";

// --- memd ---

memd::RegionOptions memd_options(const Config& c) {
  memd::RegionOptions o;
  o.discipline = memd::Discipline::kFile;
  o.max_bytes = c.bytes;
  return o;
}

void memd_phase(const Config& c) {
  if (c.phase == "create") {
    auto t0 = Clock::now();
    auto r = memd::Region::create(c.path, memd_options(c));
    if (!r.ok()) fail(std::string(r.status().message()));
    print(c, seconds_since(t0));
    return;
  }
  if (c.phase == "fill") {
    auto t0 = Clock::now();
    auto r = memd::Region::create(c.path, memd_options(c));
    if (!r.ok()) fail(std::string(r.status().message()));
    bool created = false;
    auto* table = static_cast<uint64_t*>((*r)->root_bytes(kRootName, c.objects * 8, &created));
    if (table == nullptr) fail("root");
    std::mt19937 rng(1);
    for (uint64_t i = 0; i < c.objects; ++i) {
      void* p = (*r)->alloc(object_size(rng));
      if (p == nullptr) fail("alloc");
      std::memset(p, static_cast<int>(i), 64);
      table[i] = (*r)->offset_of(p);
    }
    r->reset();  // a clean close: checkpointed
    print(c, seconds_since(t0));
    return;
  }
  if (c.phase == "open" || c.phase == "recover") {
    auto t0 = Clock::now();
    auto r = memd::Region::open(c.path, memd::Discipline::kFile);
    if (!r.ok()) fail(std::string(r.status().message()));
    bool created = false;
    auto* table = static_cast<uint64_t*>((*r)->root_bytes(kRootName, c.objects * 8, &created));
    if (table == nullptr) fail("root");
    double s = seconds_since(t0);
    // Not timed: the first and last objects are where the table says.
    if ((*r)->size((*r)->at(table[0])) == 0 || (*r)->size((*r)->at(table[c.objects - 1])) == 0) fail("objects lost");
    print(c, s, (*r)->stat().pages_in_use * 4096);
    return;
  }
  if (c.phase == "checkpoint" || c.phase == "checkpoint-idle") {
    auto r = memd::Region::open(c.path, memd::Discipline::kFile);
    if (!r.ok()) fail(std::string(r.status().message()));
    bool created = false;
    auto* table = static_cast<uint64_t*>((*r)->root_bytes(kRootName, c.objects * 8, &created));
    if (absl::Status s = (*r)->checkpoint(); !s.ok()) fail(std::string(s.message()));
    if (c.phase == "checkpoint") {
      for (uint64_t i = 0; i < c.objects; i += 100) ++*static_cast<char*>((*r)->at(table[i]));
    }
    auto t0 = Clock::now();
    if (absl::Status s = (*r)->checkpoint(); !s.ok()) fail(std::string(s.message()));
    print(c, seconds_since(t0));
    return;
  }
  if (c.phase == "crash") {
    auto r = memd::Region::open(c.path, memd::Discipline::kFile);
    if (!r.ok()) fail(std::string(r.status().message()));
    bool created = false;
    auto* table = static_cast<uint64_t*>((*r)->root_bytes(kRootName, c.objects * 8, &created));
    std::mt19937 rng(2);
    for (uint64_t k = 0; k < c.objects / 100; ++k) {
      uint64_t i = 1 + rng() % (c.objects - 2);
      (*r)->free((*r)->at(table[i]));
      void* p = (*r)->alloc(object_size(rng));
      if (p == nullptr) fail("alloc");
      table[i] = (*r)->offset_of(p);
    }
    std::fflush(stdout);
    _exit(0);  // no close: the next open recovers
  }
  if (c.phase == "attach") {
    auto owner = memd::Region::open(c.path, memd::Discipline::kFile);
    if (!owner.ok()) fail(std::string(owner.status().message()));
    std::string socket = c.path + ".sock";
    if (absl::Status s = (*owner)->serve(socket); !s.ok()) fail(std::string(s.message()));
    int fds[2];
    if (pipe(fds) != 0) fail("pipe");
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      auto t0 = Clock::now();
      auto r = memd::Region::attach(c.path, memd::Discipline::kFile, socket);
      if (!r.ok()) _exit(2);
      bool created = false;
      auto* table = (*r)->root_bytes(kRootName, c.objects * 8, &created);
      double s = seconds_since(t0);
      if (table == nullptr) _exit(3);
      if (write(fds[1], &s, sizeof s) != sizeof s) _exit(4);
      _exit(0);
    }
    close(fds[1]);
    double s = 0;
    bool got = read(fds[0], &s, sizeof s) == sizeof s;
    int status = 0;
    waitpid(pid, &status, 0);
    if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0) fail("attach: the child failed");
    print(c, s);
    return;
  }
  fail("memd: no phase " + c.phase);
}

// --- Boost.Interprocess ---

// Boost's flush() is an asynchronous msync; a checkpoint at memd's
// durability waits for the write-back.
bool boost_sync(bip::managed_mapped_file& f) {
  auto start = reinterpret_cast<uintptr_t>(f.get_address()) & ~uintptr_t{4095};
  size_t len = reinterpret_cast<uintptr_t>(f.get_address()) - start + f.get_size();
  return msync(reinterpret_cast<void*>(start), len, MS_SYNC) == 0;
}

void boost_phase(const Config& c) {
  using Table = bip::offset_ptr<char>;
  if (c.phase == "create") {
    auto t0 = Clock::now();
    bip::managed_mapped_file f(bip::create_only, c.path.c_str(), c.bytes);
    print(c, seconds_since(t0));
    return;
  }
  if (c.phase == "fill") {
    auto t0 = Clock::now();
    {
      bip::managed_mapped_file f(bip::create_only, c.path.c_str(), c.bytes);
      Table* table = f.construct<Table>(kRootName)[c.objects]();
      std::mt19937 rng(1);
      for (uint64_t i = 0; i < c.objects; ++i) {
        auto* p = static_cast<char*>(f.allocate(object_size(rng)));
        std::memset(p, static_cast<int>(i), 64);
        table[i] = p;
      }
      if (!boost_sync(f)) fail("boost: msync");  // as memd's clean close checkpoints
    }
    print(c, seconds_since(t0));
    return;
  }
  if (c.phase == "open" || c.phase == "attach" || c.phase == "recover") {
    auto t0 = Clock::now();
    bip::managed_mapped_file f(bip::open_only, c.path.c_str());
    auto found = f.find<Table>(kRootName);
    double s = seconds_since(t0);
    if (found.first == nullptr || found.second != c.objects) fail("boost: root lost");
    print(c, s, f.get_size() - f.get_free_memory());
    return;
  }
  if (c.phase == "checkpoint" || c.phase == "checkpoint-idle") {
    bip::managed_mapped_file f(bip::open_only, c.path.c_str());
    Table* table = f.find<Table>(kRootName).first;
    if (!boost_sync(f)) fail("boost: msync");
    if (c.phase == "checkpoint") {
      for (uint64_t i = 0; i < c.objects; i += 100) ++*table[i];
    }
    auto t0 = Clock::now();
    if (!boost_sync(f)) fail("boost: msync");
    print(c, seconds_since(t0));
    return;
  }
  if (c.phase == "crash") {
    auto* f = new bip::managed_mapped_file(bip::open_only, c.path.c_str());
    Table* table = f->find<Table>(kRootName).first;
    std::mt19937 rng(2);
    for (uint64_t k = 0; k < c.objects / 100; ++k) {
      uint64_t i = 1 + rng() % (c.objects - 2);
      f->deallocate(table[i].get());
      table[i] = static_cast<char*>(f->allocate(object_size(rng)));
    }
    _exit(0);
  }
  fail("boost: no phase " + c.phase);
}

// --- libpmemobj ---

constexpr const char* kLayout = "memd-bench-open";
struct PmemRoot {
  PMEMoid table;
};

void pmemobj_phase(const Config& c) {
  if (c.phase == "create") {
    auto t0 = Clock::now();
    PMEMobjpool* pop = pmemobj_create(c.path.c_str(), kLayout, c.bytes, 0600);
    if (pop == nullptr) fail(std::string("pmemobj_create: ") + pmemobj_errormsg());
    print(c, seconds_since(t0));
    pmemobj_close(pop);
    return;
  }
  if (c.phase == "fill") {
    auto t0 = Clock::now();
    PMEMobjpool* pop = pmemobj_create(c.path.c_str(), kLayout, c.bytes, 0600);
    if (pop == nullptr) fail(std::string("pmemobj_create: ") + pmemobj_errormsg());
    auto* root = static_cast<PmemRoot*>(pmemobj_direct(pmemobj_root(pop, sizeof(PmemRoot))));
    if (pmemobj_zalloc(pop, &root->table, c.objects * sizeof(PMEMoid), 1) != 0) fail("pmemobj table");
    auto* table = static_cast<PMEMoid*>(pmemobj_direct(root->table));
    std::mt19937 rng(1);
    for (uint64_t i = 0; i < c.objects; ++i) {
      if (pmemobj_alloc(pop, &table[i], object_size(rng), 2, nullptr, nullptr) != 0) fail("pmemobj_alloc");
      std::memset(pmemobj_direct(table[i]), static_cast<int>(i), 64);
    }
    pmemobj_close(pop);
    print(c, seconds_since(t0));
    return;
  }
  if (c.phase == "open" || c.phase == "recover") {
    auto t0 = Clock::now();
    PMEMobjpool* pop = pmemobj_open(c.path.c_str(), kLayout);
    if (pop == nullptr) fail(std::string("pmemobj_open: ") + pmemobj_errormsg());
    auto* root = static_cast<PmemRoot*>(pmemobj_direct(pmemobj_root(pop, sizeof(PmemRoot))));
    auto* table = static_cast<PMEMoid*>(pmemobj_direct(root->table));
    double s = seconds_since(t0);
    if (table == nullptr || pmemobj_direct(table[c.objects - 1]) == nullptr) fail("pmemobj: objects lost");
    print(c, s);
    pmemobj_close(pop);
    return;
  }
  if (c.phase == "crash") {
    PMEMobjpool* pop = pmemobj_open(c.path.c_str(), kLayout);
    if (pop == nullptr) fail(std::string("pmemobj_open: ") + pmemobj_errormsg());
    auto* root = static_cast<PmemRoot*>(pmemobj_direct(pmemobj_root(pop, sizeof(PmemRoot))));
    auto* table = static_cast<PMEMoid*>(pmemobj_direct(root->table));
    std::mt19937 rng(2);
    for (uint64_t k = 0; k < c.objects / 100; ++k) {
      uint64_t i = 1 + rng() % (c.objects - 2);
      pmemobj_free(&table[i]);
      if (pmemobj_alloc(pop, &table[i], object_size(rng), 2, nullptr, nullptr) != 0) fail("pmemobj_alloc");
    }
    _exit(0);
  }
  fail("pmemobj: no phase " + c.phase);
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--heap") c.heap = v;
    else if (k == "--phase") c.phase = v;
    else if (k == "--path") c.path = v;
    else if (k == "--bytes") c.bytes = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--objects") c.objects = std::strtoull(v.c_str(), nullptr, 10);
    else fail("unknown option " + k);
  }
  if (c.heap.empty() || c.phase.empty() || c.path.empty() || c.objects < 3) {
    fail("usage: bench_open --heap memd|boost|pmemobj --phase "
         "create|fill|open|attach|checkpoint|checkpoint-idle|crash|recover --path FILE [--bytes N] [--objects N]");
  }
  if (c.heap == "memd") memd_phase(c);
  else if (c.heap == "boost") boost_phase(c);
  else if (c.heap == "pmemobj") pmemobj_phase(c);
  else fail("no heap " + c.heap);
  return 0;
}
