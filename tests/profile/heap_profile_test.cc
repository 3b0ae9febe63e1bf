// build_heap_profile: the decoded profile (tables, sample types, unsampled
// values, labels) and the file as `go tool pprof` reads it.
#include "daemon/heap_profile.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "pprof/profile.pb.h"
#include "tools/memdctl/profile_summary.h"

namespace memd::daemon {
namespace {

namespace pprof = perftools::profiles;

constexpr uint64_t kPeriod = 512 * 1024;  // Go's default MemProfileRate
constexpr uint64_t kBig = 1 << 20;
constexpr uint64_t kSmall = 4096;
constexpr uint64_t kTiny = 64;
constexpr uint64_t kSpaceA = 101, kSpaceB = 202;  // two client processes

// The formula the profile must apply, written out independently.
int64_t unsampled(uint64_t count, uint64_t bytes, uint64_t period, bool space) {
  double weight = 1.0 / (1.0 - std::exp(-static_cast<double>(bytes) / static_cast<double>(period)));
  return std::llround(static_cast<double>(count) * weight * (space ? static_cast<double>(bytes) : 1.0));
}

// alloc_big (A) and alloc_small (B) called from main in two processes, one
// of alloc_small's two allocations freed, and a freed allocation made at an
// address nobody could name. main is at 0x2000 in both: two locations, one
// function; 0x1000 is alloc_big in A and alloc_small in B.
ProfileInput sample_input() {
  ProfileInput input;
  input.sample_period_bytes = kPeriod;
  input.time_nanos = 1'700'000'000'000'000'000;
  input.comment = "region orders, 2 clients";
  auto frames = [&](uint64_t space, uint64_t inner, const std::string& name) {
    return std::vector<ProfileFrame>{{inner, input.function(name), space}, {0x2000, input.function("main"), space}};
  };
  input.samples = {
      {frames(kSpaceA, 0x1000, "alloc_big"), kBig, true},
      {frames(kSpaceB, 0x1000, "alloc_small"), kSmall, true},
      {frames(kSpaceB, 0x1000, "alloc_small"), kSmall, false},
      {frames(kSpaceA, 0x5000, ""), kTiny, false},
  };
  return input;
}

std::string gunzip(const std::string& data) {
  z_stream z{};
  EXPECT_EQ(inflateInit2(&z, MAX_WBITS + 16), Z_OK);  // gzip only: a raw proto fails
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  std::string out;
  char buffer[16384];
  int result = Z_OK;
  while (result == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(buffer);
    z.avail_out = sizeof buffer;
    result = inflate(&z, Z_NO_FLUSH);
    out.append(buffer, sizeof buffer - z.avail_out);
  }
  inflateEnd(&z);
  EXPECT_EQ(result, Z_STREAM_END) << "not a complete gzip stream";
  return out;
}

pprof::Profile decode(const std::string& gzipped) {
  pprof::Profile profile;
  EXPECT_TRUE(profile.ParseFromString(gunzip(gzipped)));
  return profile;
}

const std::string& str(const pprof::Profile& p, int64_t index) {
  static const std::string kBad = "<bad string index>";
  return index >= 0 && index < p.string_table_size() ? p.string_table(static_cast<int>(index)) : kBad;
}

std::string function_name(const pprof::Profile& p, uint64_t function_id) {
  for (const pprof::Function& f : p.function()) {
    if (f.id() == function_id) return str(p, f.name());
  }
  return "<no function " + std::to_string(function_id) + ">";
}

const pprof::Location* location(const pprof::Profile& p, uint64_t id) {
  for (const pprof::Location& l : p.location()) {
    if (l.id() == id) return &l;
  }
  return nullptr;
}

// "alloc_big<main", or "0x5000<main" for a frame without a function.
std::string stack_text(const pprof::Profile& p, const pprof::Sample& s) {
  std::string text;
  for (uint64_t id : s.location_id()) {
    const pprof::Location* l = location(p, id);
    if (!text.empty()) text += "<";
    if (l == nullptr) {
      text += "<no location>";
    } else if (l->line_size() == 0) {
      text += absl::StrCat("0x", absl::Hex(l->address()));
    } else {
      text += function_name(p, l->line(0).function_id());
    }
  }
  return text;
}

TEST(HeapProfile, Header) {
  absl::StatusOr<std::string> gz = build_heap_profile(sample_input());
  ASSERT_TRUE(gz.ok()) << gz.status();
  pprof::Profile p = decode(*gz);
  ASSERT_GT(p.string_table_size(), 0);
  EXPECT_EQ(p.string_table(0), "");
  std::vector<std::string> types;
  for (const pprof::ValueType& t : p.sample_type()) types.push_back(str(p, t.type()) + "/" + str(p, t.unit()));
  EXPECT_EQ(types, (std::vector<std::string>{"alloc_objects/count", "alloc_space/bytes", "inuse_objects/count",
                                             "inuse_space/bytes"}));
  EXPECT_EQ(str(p, p.default_sample_type()), "inuse_space");
  EXPECT_EQ(str(p, p.period_type().type()), "space");
  EXPECT_EQ(str(p, p.period_type().unit()), "bytes");
  EXPECT_EQ(p.period(), static_cast<int64_t>(kPeriod));
  EXPECT_EQ(p.time_nanos(), 1'700'000'000'000'000'000);
  ASSERT_EQ(p.comment_size(), 1);
  EXPECT_EQ(str(p, p.comment(0)), "region orders, 2 clients");
  // Each string once.
  std::map<std::string, int> seen;
  for (const std::string& s : p.string_table()) EXPECT_EQ(++seen[s], 1) << "\"" << s << "\" twice";
}

TEST(HeapProfile, FunctionsAndLocations) {
  pprof::Profile p = decode(build_heap_profile(sample_input()).value());
  std::map<std::string, int> functions;
  for (const pprof::Function& f : p.function()) {
    EXPECT_NE(f.id(), 0u);
    EXPECT_EQ(f.system_name(), f.name());
    ++functions[str(p, f.name())];
  }
  EXPECT_EQ(functions, (std::map<std::string, int>{{"alloc_big", 1}, {"alloc_small", 1}, {"main", 1}}));

  // (A, 0x1000) alloc_big, (A, 0x2000) main, (B, 0x1000) alloc_small,
  // (B, 0x2000) main, (A, 0x5000) unnamed: five places.
  ASSERT_EQ(p.location_size(), 5);
  std::map<uint64_t, std::vector<std::string>> by_address;
  for (const pprof::Location& l : p.location()) {
    EXPECT_NE(l.id(), 0u);
    by_address[l.address()].push_back(l.line_size() == 0 ? "" : function_name(p, l.line(0).function_id()));
  }
  EXPECT_EQ(by_address[0x1000], (std::vector<std::string>{"alloc_big", "alloc_small"}));
  EXPECT_EQ(by_address[0x2000], (std::vector<std::string>{"main", "main"}));
  EXPECT_EQ(by_address[0x5000], (std::vector<std::string>{""}));
}

TEST(HeapProfile, UnsampledValuesAndLabels) {
  pprof::Profile p = decode(build_heap_profile(sample_input()).value());
  // alloc_small's two samples share stack and size: one Sample, count 2.
  ASSERT_EQ(p.sample_size(), 3);
  std::map<std::string, const pprof::Sample*> by_stack;
  for (const pprof::Sample& s : p.sample()) by_stack[stack_text(p, s)] = &s;
  ASSERT_EQ(by_stack.size(), 3u);

  struct Expected {
    std::string stack;
    uint64_t bytes, count, live;
  };
  for (const Expected& e : {Expected{"alloc_big<main", kBig, 1, 1}, Expected{"alloc_small<main", kSmall, 2, 1},
                            Expected{"0x5000<main", kTiny, 1, 0}}) {
    SCOPED_TRACE(e.stack);
    ASSERT_TRUE(by_stack.count(e.stack));
    const pprof::Sample& s = *by_stack[e.stack];
    ASSERT_EQ(s.value_size(), 4);
    EXPECT_EQ(s.value(0), unsampled(e.count, e.bytes, kPeriod, false));
    EXPECT_EQ(s.value(1), unsampled(e.count, e.bytes, kPeriod, true));
    EXPECT_EQ(s.value(2), e.live == 0 ? 0 : unsampled(e.live, e.bytes, kPeriod, false));
    EXPECT_EQ(s.value(3), e.live == 0 ? 0 : unsampled(e.live, e.bytes, kPeriod, true));
    ASSERT_EQ(s.label_size(), 1);
    EXPECT_EQ(str(p, s.label(0).key()), "bytes");
    EXPECT_EQ(s.label(0).num(), static_cast<int64_t>(e.bytes));
    EXPECT_EQ(str(p, s.label(0).num_unit()), "bytes");
  }
  // The arithmetic by hand, for one: 1 MiB at a 512 KiB period is sampled
  // with probability 1 - e^-2, so it stands for 1.1565 allocations.
  EXPECT_EQ(by_stack["alloc_big<main"]->value(1), 1212697);
  EXPECT_EQ(by_stack["alloc_big<main"]->value(0), 1);
}

TEST(HeapProfile, EveryAllocationSampledIsNotScaled) {
  ProfileInput input = sample_input();
  input.sample_period_bytes = 0;  // every allocation
  input.samples.push_back({{{0x9000, input.function("zero"), kSpaceA}}, 0, true});
  pprof::Profile p = decode(build_heap_profile(input).value());
  EXPECT_EQ(p.period(), 1);
  for (const pprof::Sample& s : p.sample()) {
    const int64_t bytes = s.label(0).num();
    const int64_t count = bytes == static_cast<int64_t>(kSmall) ? 2 : 1;
    EXPECT_EQ(s.value(0), count) << stack_text(p, s);
    EXPECT_EQ(s.value(1), count * bytes) << stack_text(p, s);
  }
  // A zero-byte sample under a real period counts once, not infinitely.
  input.sample_period_bytes = kPeriod;
  input.samples = {{{{0x9000, input.function("zero"), kSpaceA}}, 0, true}};
  p = decode(build_heap_profile(input).value());
  ASSERT_EQ(p.sample_size(), 1);
  EXPECT_EQ(p.sample(0).value(0), 1);
  EXPECT_EQ(p.sample(0).value(1), 0);
}

TEST(HeapProfile, EmptyInputIsAValidProfile) {
  absl::StatusOr<std::string> gz = build_heap_profile(ProfileInput{});
  ASSERT_TRUE(gz.ok()) << gz.status();
  pprof::Profile p = decode(*gz);
  EXPECT_EQ(p.sample_size(), 0);
  EXPECT_EQ(p.location_size(), 0);
  EXPECT_EQ(p.function_size(), 0);
  EXPECT_EQ(p.sample_type_size(), 4);
  EXPECT_EQ(str(p, p.default_sample_type()), "inuse_space");
  EXPECT_EQ(p.comment_size(), 0);
}

TEST(HeapProfile, PeriodBeyondInt64IsRejected) {
  ProfileInput input = sample_input();
  input.sample_period_bytes = static_cast<uint64_t>(INT64_MAX) + 1;
  absl::StatusOr<std::string> gz = build_heap_profile(input);
  EXPECT_EQ(gz.status().code(), absl::StatusCode::kInvalidArgument) << gz.status();
  EXPECT_NE(gz.status().message().find("period"), std::string::npos) << gz.status();
}

// Sizes come from clients: one beyond int64 (or one whose unsampled values
// are) is dropped and counted in a comment, and the rest still make a
// profile -- one bad client does not deny everyone theirs.
TEST(HeapProfile, SizesBeyondInt64AreDroppedAndCounted) {
  ProfileInput input = sample_input();
  const size_t kept = decode(build_heap_profile(input).value()).sample_size();
  input.samples.push_back({{{0x1000, input.function("f"), 1}}, UINT64_MAX, true});
  input.samples.push_back({{{0x1000, input.function("f"), 1}}, uint64_t{1} << 62, true});
  input.samples.push_back({{{0x1000, input.function("f"), 1}}, uint64_t{1} << 62, true});
  absl::StatusOr<std::string> gz = build_heap_profile(input);
  ASSERT_TRUE(gz.ok()) << gz.status();
  pprof::Profile p = decode(*gz);
  EXPECT_EQ(static_cast<size_t>(p.sample_size()), kept);
  bool said = false;
  for (int64_t c : p.comment()) said |= p.string_table(static_cast<int>(c)) == "3 samples dropped: sizes beyond int64";
  EXPECT_TRUE(said) << "the drop is not in the profile's comments";
}

// ---- go tool pprof reads the file ----

// `go` on PATH, else where the Go distribution installs itself.
std::optional<std::string> find_go() {
  const char* path = std::getenv("PATH");
  for (const auto& dir : absl::StrSplit(path == nullptr ? "" : path, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/go");
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  if (access("/usr/local/go/bin/go", X_OK) == 0) return "/usr/local/go/bin/go";
  return std::nullopt;
}

struct GoRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

// Runs go in `dir` with a home, GOPATH and flags of its own, no network and
// no toolchain switch: pprof comes with the Go distribution. GOCACHE is
// kept in the build tree (PPROF_GO_CACHE) because Go builds pprof from
// source on first use, which takes minutes on a cold cache.
GoRun run_go(const std::string& go, const std::string& dir, const std::vector<std::string>& args) {
  std::vector<std::string> env = {
      absl::StrCat("PATH=", std::getenv("PATH") == nullptr ? "/usr/bin:/bin" : std::getenv("PATH")),
      "HOME=" + dir,
      "GOPATH=" + dir + "/gopath",
      "GOCACHE=" PPROF_GO_CACHE,
      "GOFLAGS=",
      "GOENV=off",
      "GOTOOLCHAIN=local",
      "GOPROXY=off",
      "PPROF_TMPDIR=" + dir,
      "TMPDIR=" + dir,
  };
  std::vector<std::string> argv = {go};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> argv_c, env_c;
  for (std::string& a : argv) argv_c.push_back(a.data());
  for (std::string& e : env) env_c.push_back(e.data());
  argv_c.push_back(nullptr);
  env_c.push_back(nullptr);

  GoRun run;
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return run;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pipe_fds[1], STDOUT_FILENO);
    dup2(pipe_fds[1], STDERR_FILENO);
    if (chdir(dir.c_str()) != 0) _exit(126);
    execve(go.c_str(), argv_c.data(), env_c.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  char buffer[4096];
  for (ssize_t n; (n = read(pipe_fds[0], buffer, sizeof buffer)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    run.output.append(buffer, static_cast<size_t>(n));
  }
  close(pipe_fds[0]);
  int status = 0;
  if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  return run;
}

// The row of `-top` output for a function: flat, flat%, sum%, cum, cum%, name.
std::optional<std::vector<std::string>> top_row(const std::string& output, const std::string& name) {
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    std::vector<std::string> cells = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (cells.size() == 6 && cells[5] == name) return cells;
  }
  return std::nullopt;
}

// The first row below the column titles.
std::string first_function(const std::string& output) {
  bool in_table = false;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    std::vector<std::string> cells = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (in_table) return cells.size() == 6 ? cells[5] : "<unparsed: " + std::string(line) + ">";
    in_table = cells.size() >= 5 && cells[0] == "flat";
  }
  return "<no table>";
}

class GoPprof : public ::testing::Test {
 protected:
  void SetUp() override {
    std::optional<std::string> go = find_go();
    // Not a skip: a machine without Go would silently never check the file.
    ASSERT_TRUE(go.has_value()) << "no `go` on PATH nor at /usr/local/go/bin/go: `go tool pprof` reads the "
                                   "profiles memd writes and this test needs it (tools/setup.sh installs golang-go)";
    go_ = *go;
    std::string pattern = ::testing::TempDir() + "memd-pprof-XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
    dir_ = pattern;
  }
  void TearDown() override {
    if (dir_.empty()) return;
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::string write_profile(const ProfileInput& input) {
    absl::StatusOr<std::string> gz = build_heap_profile(input);
    EXPECT_TRUE(gz.ok()) << gz.status();
    std::string file = dir_ + "/heap.pb.gz";
    std::ofstream(file, std::ios::binary) << gz.value_or("");
    return file;
  }

  // Every node (-nodefraction=0), and sizes as exact byte counts (-unit=B,
  // not pprof's rounded "1.16MB"; it would suffix counts with B as well).
  GoRun top(const std::string& file, const std::string& sample_index) {
    std::vector<std::string> args = {"tool", "pprof", "-top", "-nodefraction=0", "-sample_index=" + sample_index};
    if (sample_index.find("space") != std::string::npos) args.push_back("-unit=B");
    args.push_back(file);
    return run_go(go_, dir_, args);
  }

  std::string go_, dir_;
};

TEST_F(GoPprof, TopByInuseSpaceAndAllocObjects) {
  std::string file = write_profile(sample_input());

  GoRun inuse = top(file, "inuse_space");
  ASSERT_EQ(inuse.exit_code, 0) << inuse.output;
  EXPECT_NE(inuse.output.find("Type: inuse_space"), std::string::npos) << inuse.output;
  EXPECT_EQ(first_function(inuse.output), "alloc_big") << inuse.output;
  std::optional<std::vector<std::string>> big = top_row(inuse.output, "alloc_big");
  ASSERT_TRUE(big.has_value()) << inuse.output;
  EXPECT_EQ((*big)[0], absl::StrCat(unsampled(1, kBig, kPeriod, true), "B")) << inuse.output;
  std::optional<std::vector<std::string>> small = top_row(inuse.output, "alloc_small");
  ASSERT_TRUE(small.has_value()) << inuse.output;
  EXPECT_EQ((*small)[0], absl::StrCat(unsampled(1, kSmall, kPeriod, true), "B")) << inuse.output;
  // main only calls: nothing flat, everything cumulative.
  std::optional<std::vector<std::string>> main_row = top_row(inuse.output, "main");
  ASSERT_TRUE(main_row.has_value()) << inuse.output;
  EXPECT_EQ((*main_row)[0], "0");
  EXPECT_EQ((*main_row)[3], absl::StrCat(unsampled(1, kBig, kPeriod, true) + unsampled(1, kSmall, kPeriod, true), "B"))
      << inuse.output;

  GoRun objects = top(file, "alloc_objects");
  ASSERT_EQ(objects.exit_code, 0) << objects.output;
  EXPECT_NE(objects.output.find("Type: alloc_objects"), std::string::npos) << objects.output;
  // The freed 64-byte allocation stands for the most objects: its frame has
  // no name (and memd sends no mappings), so pprof calls it <unknown>.
  EXPECT_EQ(first_function(objects.output), "<unknown>") << objects.output;
  std::optional<std::vector<std::string>> unknown = top_row(objects.output, "<unknown>");
  ASSERT_TRUE(unknown.has_value()) << objects.output;
  EXPECT_EQ((*unknown)[0], absl::StrCat(unsampled(1, kTiny, kPeriod, false))) << objects.output;
  small = top_row(objects.output, "alloc_small");
  ASSERT_TRUE(small.has_value()) << objects.output;
  EXPECT_EQ((*small)[0], absl::StrCat(unsampled(2, kSmall, kPeriod, false))) << objects.output;
  big = top_row(objects.output, "alloc_big");
  ASSERT_TRUE(big.has_value()) << objects.output;
  EXPECT_EQ((*big)[0], "1") << objects.output;
}

TEST_F(GoPprof, EmptyProfileReads) {
  GoRun run = top(write_profile(ProfileInput{}), "inuse_space");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("Type: inuse_space"), std::string::npos) << run.output;
}


// ---- the profile method's summary as pprof (memdctl pprof) ----

// Figure 10's summary of the Figure 8 program, one return-address site, and
// a second region's summary after it.
constexpr char kSummary[] =
    "ALLOCATION USAGE SUMMARY:n_alloc=3:n_free=1:s_alloc=21:s_free=5:\n"
    "region=(process):n_alloc=3:n_free=1:s_alloc=21:s_free=5:max_busy=21:extent=4096:\n"
    "file=t.c:n_alloc=2:n_free=1:s_alloc=9:s_free=5:\n"
    "    line=4:region=(process):n_alloc=1:n_free=0:s_alloc=4:s_free=0:\n"
    "    line=10:region=(process):n_alloc=1:n_free=1:s_alloc=5:s_free=5:\n"
    "file=<>:n_alloc=1:n_free=0:s_alloc=12:s_free=0:\n"
    "    pc=/lib/libc.so.6+0x8a1b2:region=(process):n_alloc=1:n_free=0:s_alloc=12:s_free=0:\n"
    "ALLOCATION USAGE SUMMARY:n_alloc=7:n_free=2:s_alloc=700:s_free=200:\n"
    "region=0x55d0c4a2e360:n_alloc=7:n_free=2:s_alloc=700:s_free=200:max_busy=600:extent=8192:\n"
    "file=u.c:n_alloc=7:n_free=2:s_alloc=700:s_free=200:\n"
    "    line=4:region=0x55d0c4a2e360:n_alloc=7:n_free=2:s_alloc=700:s_free=200:\n";

struct SiteValues {
  std::string function, file, region;
  int64_t line = 0;
  std::vector<int64_t> values;
};

std::vector<SiteValues> decode_sites(const std::string& bytes) {
  perftools::profiles::Profile p;
  EXPECT_TRUE(p.ParseFromString(bytes));
  auto str = [&](int64_t i) { return p.string_table(static_cast<int>(i)); };
  std::vector<SiteValues> out;
  for (const auto& sample : p.sample()) {
    SiteValues v;
    EXPECT_EQ(sample.location_id_size(), 1);
    const auto& loc = p.location(static_cast<int>(sample.location_id(0) - 1));
    EXPECT_EQ(loc.id(), sample.location_id(0));
    const auto& fn = p.function(static_cast<int>(loc.line(0).function_id() - 1));
    v.function = str(fn.name());
    v.file = str(fn.filename());
    v.line = loc.line(0).line();
    v.values.assign(sample.value().begin(), sample.value().end());
    EXPECT_EQ(str(sample.label(0).key()), "region");
    v.region = str(sample.label(0).str());
    out.push_back(v);
  }
  return out;
}

TEST(ProfileSummary, EachSiteIsASampleWithExactCounts) {
  absl::StatusOr<std::string> bytes = memd::memdctl::summary_to_pprof(kSummary);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  std::vector<SiteValues> sites = decode_sites(*bytes);
  ASSERT_EQ(sites.size(), 4u);
  // alloc_objects, alloc_space, inuse_objects, inuse_space.
  EXPECT_EQ(sites[0].function, "t.c");
  EXPECT_EQ(sites[0].file, "t.c");
  EXPECT_EQ(sites[0].line, 4);
  EXPECT_EQ(sites[0].region, "(process)");
  EXPECT_EQ(sites[0].values, (std::vector<int64_t>{1, 4, 1, 4}));
  EXPECT_EQ(sites[1].line, 10);
  EXPECT_EQ(sites[1].values, (std::vector<int64_t>{1, 5, 0, 0}));
  EXPECT_EQ(sites[2].function, "/lib/libc.so.6+0x8a1b2");
  EXPECT_EQ(sites[2].file, "");
  EXPECT_EQ(sites[2].values, (std::vector<int64_t>{1, 12, 1, 12}));
  EXPECT_EQ(sites[3].function, "u.c");
  EXPECT_EQ(sites[3].region, "0x55d0c4a2e360");
  EXPECT_EQ(sites[3].values, (std::vector<int64_t>{7, 700, 5, 500}));
}

TEST(ProfileSummary, WhatIsNotASummaryIsRefusedNamingTheLine) {
  absl::StatusOr<std::string> none = memd::memdctl::summary_to_pprof("");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  std::string bad = std::string(kSummary) + "    line=x:region=r:n_alloc=1:n_free=0:s_alloc=1:s_free=0:\n";
  absl::StatusOr<std::string> r = memd::memdctl::summary_to_pprof(bad);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("line 12"), absl::string_view::npos) << r.status();
  // More freed than allocated, a site before any file, and a stray line.
  for (const char* text : {"ALLOCATION USAGE SUMMARY:\nfile=a:n_alloc=1:n_free=2:s_alloc=1:s_free=1:\n",
                           "ALLOCATION USAGE SUMMARY:\n    line=3:region=r:n_alloc=1:n_free=0:s_alloc=1:s_free=0:\n",
                           "ALLOCATION USAGE SUMMARY:\nhello\n"}) {
    EXPECT_EQ(memd::memdctl::summary_to_pprof(text).status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
}

TEST(ProfileSummary, BytesThatAreNotUtf8AreEscapedAndTheProfileStillParses) {
  std::string text =
      "ALLOCATION USAGE SUMMARY:n_alloc=1:n_free=0:s_alloc=8:s_free=0:\n"
      "file=<>:n_alloc=1:n_free=0:s_alloc=8:s_free=0:\n"
      "    pc=/lib/\xff\xc0\x80lib.so+0x10:region=r\xed\xa0\x80:n_alloc=1:n_free=0:s_alloc=8:s_free=0:\n";
  absl::StatusOr<std::string> bytes = memd::memdctl::summary_to_pprof(text);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  std::vector<SiteValues> sites = decode_sites(*bytes);
  ASSERT_EQ(sites.size(), 1u);
  // 0xff is no UTF-8; c0 80 is an overlong NUL; ed a0 80 a surrogate.
  EXPECT_EQ(sites[0].function, "/lib/\\xff\\xc0\\x80lib.so+0x10");
  EXPECT_EQ(sites[0].region, "r\\xed\\xa0\\x80");
}

TEST_F(GoPprof, ReadsASummaryConvertedToPprof) {
  absl::StatusOr<std::string> bytes = memd::memdctl::summary_to_pprof(kSummary);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  std::string file = dir_ + "/summary.pb";
  std::ofstream(file, std::ios::binary) << *bytes;
  GoRun inuse = top(file, "inuse_space");
  ASSERT_EQ(inuse.exit_code, 0) << inuse.output;
  EXPECT_EQ(first_function(inuse.output), "u.c") << inuse.output;
  std::optional<std::vector<std::string>> t = top_row(inuse.output, "t.c");
  ASSERT_TRUE(t.has_value()) << inuse.output;
  EXPECT_EQ((*t)[0], "4B") << inuse.output;
  GoRun allocs = top(file, "alloc_objects");
  ASSERT_EQ(allocs.exit_code, 0) << allocs.output;
  t = top_row(allocs.output, "t.c");
  ASSERT_TRUE(t.has_value()) << allocs.output;
  EXPECT_EQ((*t)[0], "2") << allocs.output;
}

}  // namespace
}  // namespace memd::daemon
