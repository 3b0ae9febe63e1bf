// memdctl as people and scripts use it: the real binary, run as a child
// against a real memd, its stdout, stderr and exit status read back. Regions
// and clients come from a memd::Client in this process and from test_client
// processes that hold a region open until killed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client/daemon_client.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "memd/v1/memd.pb.h"
#include "heap/layout.h"
#include "region/region.h"
#include "tests/daemon/daemon_process.h"

namespace memd {
namespace {

using testing::DaemonProcess;
using testing::spawn_process;
using testing::wait_exit;

constexpr const char* kUsageLine = "usage: memdctl";

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> words_of(const std::string& line) {
  std::vector<std::string> words;
  std::istringstream in(line);
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

// The table row (as words) whose column `column` is `value`; empty if none.
std::vector<std::string> row_where(const std::string& table, size_t column, const std::string& value) {
  for (const std::string& line : lines_of(table)) {
    std::vector<std::string> words = words_of(line);
    if (words.size() > column && words[column] == value) return words;
  }
  return {};
}

template <class Message>
Message parse_json(const std::string& json) {
  Message message;
  auto status = google::protobuf::util::JsonStringToMessage(json, &message);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << json;
  return message;
}

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::ostream& operator<<(std::ostream& os, const Result& r) {
  return os << "exit " << r.exit_code << "\n--- stdout\n" << r.out << "--- stderr\n" << r.err;
}

// Runs memdctl with `args`, its stdout and stderr to separate files in `dir`.
// `environment` entries (NAME=value) replace the inherited ones of that name;
// `cwd`, if given, is memdctl's working directory.
Result run_memdctl(const std::string& dir, const std::vector<std::string>& args,
                   const std::vector<std::string>& environment = {}, const std::string& cwd = "") {
  static int runs = 0;
  const std::string stem = dir + "/memdctl-" + std::to_string(runs++);
  const std::string out_path = stem + ".out", err_path = stem + ".err";

  std::vector<std::string> argv = {MEMDCTL_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> arg_pointers;
  for (std::string& a : argv) arg_pointers.push_back(a.data());
  arg_pointers.push_back(nullptr);

  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    bool replaced = false;
    for (const std::string& mine : environment) {
      replaced = replaced || entry.compare(0, mine.find('=') + 1, mine, 0, mine.find('=') + 1) == 0;
    }
    if (!replaced) env_strings.push_back(entry);
  }
  env_strings.insert(env_strings.end(), environment.begin(), environment.end());
  std::vector<char*> env_pointers;
  for (std::string& e : env_strings) env_pointers.push_back(e.data());
  env_pointers.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
  pid_t pid = -1;
  int spawned = posix_spawn(&pid, arg_pointers[0], &actions, nullptr, arg_pointers.data(), env_pointers.data());
  posix_spawn_file_actions_destroy(&actions);
  Result result;
  if (spawned != 0) {
    ADD_FAILURE() << "cannot start " << MEMDCTL_BINARY << ": " << std::strerror(spawned);
    return result;
  }
  result.exit_code = wait_exit(pid);
  result.out = read_text(out_path);
  result.err = read_text(err_path);
  return result;
}

// A test_client process holding region `region` open (with objects
// allocated) until it is killed at the end of the test.
class HeldClient {
 public:
  HeldClient(const DaemonProcess& daemon, const std::string& region) {
    log_ = daemon.dir() + "/held-" + region + "-" + std::to_string(count_++) + ".log";
    pid_ = spawn_process({TEST_CLIENT, daemon.socket(), region, "hold", "1", "100", "200"}, log_);
    // It prints "ready" once connected, attached and filled; generous bound
    // for slow sanitizer builds.
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < until) {
      if (read_text(log_).find("ready") != std::string::npos) {
        ready_ = true;
        return;
      }
      int status = 0;
      if (pid_ <= 0 || waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~HeldClient() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      wait_exit(pid_);
    }
  }
  HeldClient(const HeldClient&) = delete;
  HeldClient& operator=(const HeldClient&) = delete;

  bool ready() const { return ready_; }
  pid_t pid() const { return pid_; }
  std::string log() const { return read_text(log_); }

 private:
  static inline int count_ = 0;
  std::string log_;
  pid_t pid_ = -1;
  bool ready_ = false;
};

class MemdctlTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(daemon_.running()) << daemon_.log(); }

  // memdctl against this test's daemon.
  Result memdctl(const std::vector<std::string>& args) {
    std::vector<std::string> with_socket = {"--socket", daemon_.socket()};
    with_socket.insert(with_socket.end(), args.begin(), args.end());
    return run_memdctl(daemon_.dir(), with_socket);
  }

  std::unique_ptr<Client> connect() {
    ClientOptions options;
    options.socket = daemon_.socket();
    options.program = "memdctl_test";
    absl::StatusOr<std::unique_ptr<Client>> client = Client::connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  static OpenOptions shm_region(uint32_t mode = 0) {
    OpenOptions options;
    options.discipline = Discipline::kShm;
    options.max_bytes = size_t{256} << 20;
    options.mode = mode;
    return options;
  }

  DaemonProcess daemon_;
};

TEST_F(MemdctlTest, RegionsTableListsARegionAClientCreated) {
  std::unique_ptr<Client> client = connect();
  ASSERT_NE(client, nullptr);
  absl::StatusOr<std::unique_ptr<Region>> region = client->open("jobs", shm_region(0640));
  ASSERT_TRUE(region.ok()) << region.status();

  for (const char* command : {"regions", "ls"}) {
    Result r = memdctl({command});
    ASSERT_EQ(r.exit_code, 0) << r;
    EXPECT_EQ(r.err, "");
    std::vector<std::string> lines = lines_of(r.out);
    ASSERT_EQ(lines.size(), 2u) << r;
    EXPECT_EQ(words_of(lines[0]),
              (std::vector<std::string>{"NAME", "DISCIPLINE", "METHOD", "CLIENTS", "IN", "USE", "BACKING", "OBJECTS",
                                        "RESERVED", "OWNER", "MODE", "STATE"}))
        << r;
    // jobs shm best 1 <in use> <unit> <backing> <unit> <objects> 256.0 MiB <uid> 0640 served
    std::vector<std::string> row = row_where(r.out, 0, "jobs");
    ASSERT_EQ(row.size(), 14u) << r;
    EXPECT_EQ(row[13], "served");
    EXPECT_EQ(row[1], "shm");
    EXPECT_EQ(row[2], "best");
    EXPECT_EQ(row[3], "1");  // this process
    EXPECT_EQ(row[9], "256.0");
    EXPECT_EQ(row[10], "MiB");
    EXPECT_EQ(row[11], std::to_string(getuid()));
    EXPECT_EQ(row[12], "0640");
  }
}

TEST_F(MemdctlTest, JsonRegionsParsesAsTheResponseMessage) {
  std::unique_ptr<Client> client = connect();
  ASSERT_NE(client, nullptr);
  absl::StatusOr<std::unique_ptr<Region>> region = client->open("jobs", shm_region());
  ASSERT_TRUE(region.ok()) << region.status();
  HeldClient held(daemon_, "jobs");
  ASSERT_TRUE(held.ready()) << held.log();

  // --json is global: before or after the command.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--json", "regions"}, std::vector<std::string>{"regions", "--json"}}) {
    Result r = memdctl(args);
    ASSERT_EQ(r.exit_code, 0) << r;
    auto list = parse_json<v1::ListRegionsResponse>(r.out);
    ASSERT_EQ(list.regions_size(), 1) << r;
    const v1::RegionInfo& info = list.regions(0);
    EXPECT_EQ(info.name(), "jobs");
    EXPECT_EQ(info.clients(), 2u);  // this process and the held client
    EXPECT_EQ(info.discipline(), v1::DISCIPLINE_SHM);
    EXPECT_EQ(info.max_bytes(), uint64_t{256} << 20);
    EXPECT_EQ(info.mode(), 0600u);
    EXPECT_GE(info.objects(), 100u);  // the held client's
  }
  // Zeros are printed too, under their .proto names, for scripts.
  Result r = memdctl({"--json", "regions"});
  EXPECT_NE(r.out.find("\"leaked_objects\":"), std::string::npos) << r;
}

TEST_F(MemdctlTest, StatPrintsEveryFieldOfTheRegion) {
  std::unique_ptr<Client> client = connect();
  ASSERT_NE(client, nullptr);
  absl::StatusOr<std::unique_ptr<Region>> region = client->open("jobs", shm_region());
  ASSERT_TRUE(region.ok()) << region.status();

  Result r = memdctl({"stat", "jobs"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const google::protobuf::Descriptor& fields = *v1::RegionInfo::descriptor();
  std::vector<std::string> lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), static_cast<size_t>(fields.field_count())) << r;
  for (int i = 0; i < fields.field_count(); ++i) {
    EXPECT_EQ(lines[i].rfind(fields.field(i)->name() + ": ", 0), 0u) << lines[i];
  }
  EXPECT_NE(r.out.find("name: jobs\n"), std::string::npos) << r;
  EXPECT_NE(r.out.find("discipline: shm\n"), std::string::npos) << r;
  EXPECT_NE(r.out.find("mode: 0600\n"), std::string::npos) << r;
  EXPECT_NE(r.out.find("max_bytes: 268435456 (256.0 MiB)\n"), std::string::npos) << r;
  EXPECT_NE(r.out.find("clients: 1\n"), std::string::npos) << r;

  Result json = memdctl({"--json", "stat", "jobs"});
  ASSERT_EQ(json.exit_code, 0) << json;
  auto info = parse_json<v1::RegionInfo>(json.out);
  EXPECT_EQ(info.name(), "jobs");
  EXPECT_EQ(info.clients(), 1u);
}

TEST_F(MemdctlTest, StatOfAnUnknownRegionIsNotFound) {
  Result r = memdctl({"stat", "nosuch"});
  EXPECT_EQ(r.exit_code, 4) << r;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.rfind("memdctl: stat: NOT_FOUND: ", 0), 0u) << r;
  EXPECT_NE(r.err.find("nosuch"), std::string::npos) << r;
}

TEST_F(MemdctlTest, ClientsShowsALiveClientsPidAndLease) {
  HeldClient held(daemon_, "jobs");
  ASSERT_TRUE(held.ready()) << held.log();

  Result r = memdctl({"clients"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(words_of(lines_of(r.out).at(0)),
            (std::vector<std::string>{"SESSION", "PID", "UID", "PROGRAM", "RPCS", "REGIONS"}))
      << r;
  // SESSION PID UID test_client hold RPCS jobs:SLOT blocks=N
  std::vector<std::string> row = row_where(r.out, 1, std::to_string(held.pid()));
  ASSERT_EQ(row.size(), 8u) << r;
  EXPECT_EQ(row[2], std::to_string(getuid()));
  EXPECT_EQ(row[3] + " " + row[4], "test_client hold");
  EXPECT_EQ(row[6].rfind("jobs:", 0), 0u) << r;
  EXPECT_EQ(row[7].rfind("blocks=", 0), 0u) << r;

  Result json = memdctl({"--json", "clients"});
  ASSERT_EQ(json.exit_code, 0) << json;
  auto list = parse_json<v1::ListClientsResponse>(json.out);
  ASSERT_EQ(list.clients_size(), 1) << json;
  EXPECT_EQ(list.clients(0).pid(), held.pid());
  EXPECT_EQ(list.clients(0).program(), "test_client hold");
  ASSERT_EQ(list.clients(0).leases_size(), 1);
  EXPECT_EQ(list.clients(0).leases(0).region(), "jobs");
}

TEST_F(MemdctlTest, CheckPassesOnAHealthyRegion) {
  std::unique_ptr<Client> client = connect();
  ASSERT_NE(client, nullptr);
  absl::StatusOr<std::unique_ptr<Region>> region = client->open("jobs", shm_region());
  ASSERT_TRUE(region.ok()) << region.status();
  std::vector<void*> objects;
  for (int i = 0; i < 1000; ++i) objects.push_back((*region)->alloc(64 + i % 500));
  for (int i = 0; i < 1000; i += 2) (*region)->free(objects[i]);

  // This process's thread owns blocks: their insides may change under the
  // check, so the daemon checks their descriptors only, and says so.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"check"}, std::vector<std::string>{"check", "jobs"}}) {
    Result r = memdctl(args);
    EXPECT_EQ(r.exit_code, 0) << r;
    EXPECT_EQ(r.out.rfind("jobs ok (", 0), 0u) << r;
    EXPECT_NE(r.out.find(" blocks owned by running threads: descriptors only)\n"), std::string::npos) << r;
  }
  Result json = memdctl({"--json", "check"});
  ASSERT_EQ(json.exit_code, 0) << json;
  auto results = parse_json<v1::CheckResponse>(json.out);
  ASSERT_EQ(results.results_size(), 1) << json;
  EXPECT_EQ(results.results(0).region(), "jobs");
  EXPECT_TRUE(results.results(0).ok());
  EXPECT_GT(results.results(0).blocks_skipped(), 0u);
  // Detached, its blocks are nobody's: every block is inspected.
  region->reset();
  Result quiet = memdctl({"check"});
  EXPECT_EQ(quiet.exit_code, 0) << quiet;
  EXPECT_EQ(quiet.out, "jobs ok\n") << quiet;
}

TEST_F(MemdctlTest, CheckJsonOfAQuietRegion) {
  std::unique_ptr<Client> client = connect();
  ASSERT_NE(client, nullptr);
  absl::StatusOr<std::unique_ptr<Region>> region = client->open("jobs", shm_region());
  ASSERT_TRUE(region.ok()) << region.status();
  std::vector<void*> objects;
  for (int i = 0; i < 1000; ++i) objects.push_back((*region)->alloc(64 + i % 500));
  region->reset();
  Result json = memdctl({"--json", "check"});
  ASSERT_EQ(json.exit_code, 0) << json;
  auto results = parse_json<v1::CheckResponse>(json.out);
  ASSERT_EQ(results.results_size(), 1) << json;
  EXPECT_EQ(results.results(0).region(), "jobs");
  EXPECT_TRUE(results.results(0).ok());
  EXPECT_EQ(results.results(0).blocks_skipped(), 0u);

  Result unknown = memdctl({"check", "nosuch"});
  EXPECT_EQ(unknown.exit_code, 4) << unknown;
  EXPECT_EQ(unknown.err.rfind("memdctl: check: NOT_FOUND: ", 0), 0u) << unknown;
}

TEST_F(MemdctlTest, CompactReportsBackingBytesBeforeAndAfter) {
  std::unique_ptr<Client> client = connect();
  ASSERT_NE(client, nullptr);
  absl::StatusOr<std::unique_ptr<Region>> region = client->open("jobs", shm_region());
  ASSERT_TRUE(region.ok()) << region.status();
  // Large objects touch many pages, then leave them free for compaction.
  std::vector<void*> objects;
  for (int i = 0; i < 64; ++i) {
    void* p = (*region)->alloc(256 << 10);
    ASSERT_NE(p, nullptr);
    std::memset(p, 1, 256 << 10);
    objects.push_back(p);
  }
  for (void* p : objects) (*region)->free(p);

  Result r = memdctl({"compact", "jobs"});
  ASSERT_EQ(r.exit_code, 0) << r;
  std::smatch match;
  ASSERT_TRUE(std::regex_match(r.out, match, std::regex(R"(backing: \S+ \S+ -> \S+ \S+ \((\d+) -> (\d+) bytes\)\n)")))
      << r;
  uint64_t before = std::stoull(match[1]), after = std::stoull(match[2]);
  EXPECT_GT(before, 0u) << r;
  EXPECT_LE(after, before) << r;

  Result json = memdctl({"--json", "compact"});
  ASSERT_EQ(json.exit_code, 0) << json;
  auto sizes = parse_json<v1::CompactResponse>(json.out);
  EXPECT_GT(sizes.backing_bytes_before(), 0u) << json;
  EXPECT_LE(sizes.backing_bytes_after(), sizes.backing_bytes_before()) << json;

  Result unknown = memdctl({"compact", "nosuch"});
  EXPECT_EQ(unknown.exit_code, 4) << unknown;
  EXPECT_EQ(unknown.err.rfind("memdctl: compact: NOT_FOUND: ", 0), 0u) << unknown;
}

TEST_F(MemdctlTest, DrainAsksTheSessionOfALiveClient) {
  HeldClient held(daemon_, "jobs");
  ASSERT_TRUE(held.ready()) << held.log();
  const std::string pid = std::to_string(held.pid());

  Result r = memdctl({"drain", pid});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "asked 1 session to give back spare blocks\n") << r;

  Result json = memdctl({"--json", "drain", pid, "--region", "jobs"});
  ASSERT_EQ(json.exit_code, 0) << json;
  EXPECT_EQ(parse_json<v1::DrainResponse>(json.out).sessions(), 1u) << json;

  Result other_region = memdctl({"drain", pid, "--region", "other"});
  EXPECT_EQ(other_region.exit_code, 4) << other_region;
  EXPECT_EQ(other_region.err.rfind("memdctl: drain: NOT_FOUND: ", 0), 0u) << other_region;

  // The daemon itself has no session.
  Result unknown = memdctl({"drain", std::to_string(daemon_.pid())});
  EXPECT_EQ(unknown.exit_code, 4) << unknown;
  EXPECT_EQ(unknown.out, "");
  EXPECT_EQ(unknown.err.rfind("memdctl: drain: NOT_FOUND: ", 0), 0u) << unknown;
}

TEST_F(MemdctlTest, StatsCountsTheOpenSessions) {
  std::unique_ptr<Client> client = connect();
  ASSERT_NE(client, nullptr);
  HeldClient held(daemon_, "jobs");
  ASSERT_TRUE(held.ready()) << held.log();

  Result r = memdctl({"stats"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_NE(r.out.find("\nsessions: 2\n"), std::string::npos) << r;
  EXPECT_NE(r.out.find("\nregions: 1\n"), std::string::npos) << r;
  EXPECT_NE(r.out.find("\nsocket: " + daemon_.socket() + "\n"), std::string::npos) << r;

  Result json = memdctl({"--json", "stats"});
  ASSERT_EQ(json.exit_code, 0) << json;
  auto stats = parse_json<v1::StatsResponse>(json.out);
  EXPECT_EQ(stats.sessions(), 2u);
  EXPECT_EQ(stats.regions(), 1u);
  EXPECT_EQ(stats.socket(), daemon_.socket());
  EXPECT_FALSE(stats.daemon_id().empty());
}

// memd serves the standard grpc.health.v1 service.
TEST_F(MemdctlTest, HealthSaysServing) {
  Result r = memdctl({"health"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "SERVING\n");
  Result json = memdctl({"--json", "health"});
  ASSERT_EQ(json.exit_code, 0) << json;
  EXPECT_NE(json.out.find("\"SERVING\""), std::string::npos) << json;
}

TEST_F(MemdctlTest, RemoveDeletesARegionNoClientHasAttached) {
  std::unique_ptr<Client> client = connect();
  ASSERT_NE(client, nullptr);
  absl::StatusOr<std::unique_ptr<Region>> region = client->open("jobs", shm_region());
  ASSERT_TRUE(region.ok()) << region.status();

  Result attached = memdctl({"remove", "jobs"});
  EXPECT_EQ(attached.exit_code, 4) << attached;
  EXPECT_EQ(attached.err.rfind("memdctl: remove: FAILED_PRECONDITION: ", 0), 0u) << attached;

  region->reset();  // detaches from the daemon
  Result r = memdctl({"remove", "jobs"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "removed region jobs\n");
  Result list = memdctl({"--json", "regions"});
  ASSERT_EQ(list.exit_code, 0) << list;
  EXPECT_EQ(parse_json<v1::ListRegionsResponse>(list.out).regions_size(), 0) << list;

  Result again = memdctl({"remove", "jobs"});
  EXPECT_EQ(again.exit_code, 4) << again;
  EXPECT_EQ(again.err.rfind("memdctl: remove: NOT_FOUND: ", 0), 0u) << again;
}

// Sets environment variables for the children started in its scope.
class ScopedEnvironment {
 public:
  explicit ScopedEnvironment(std::vector<std::pair<std::string, std::string>> values) : values_(std::move(values)) {
    for (const auto& [name, value] : values_) setenv(name.c_str(), value.c_str(), 1);
  }
  ~ScopedEnvironment() {
    for (const auto& [name, value] : values_) unsetenv(name.c_str());
  }

 private:
  std::vector<std::pair<std::string, std::string>> values_;
};

// A real profile only: a client that samples (often, reporting every
// 100 ms) holds objects in a region; memdctl writes the daemon's gzipped
// profile of them, with samples, all live, and says so.
TEST_F(MemdctlTest, ProfileWritesTheSampledObjectsOfARegion) {
  std::optional<HeldClient> held;
  {
    ScopedEnvironment sampling({{"MEMD_SAMPLE_BYTES", "256"}, {"MEMD_TELEMETRY_INTERVAL_MS", "100"}});
    held.emplace(daemon_, "jobs");
  }
  ASSERT_TRUE(held->ready()) << held->log();

  const std::string file = daemon_.dir() + "/jobs.pb.gz";
  google::protobuf::Struct summary;
  auto number = [&](const char* field) { return summary.fields().at(field).number_value(); };
  Result json;
  // Samples reach the daemon with the client's next report.
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
       std::chrono::steady_clock::now() < until;) {
    json = memdctl({"--json", "profile", "jobs", "-o", file});
    ASSERT_EQ(json.exit_code, 0) << json;
    summary = parse_json<google::protobuf::Struct>(json.out);
    if (number("samples") > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GT(number("samples"), 0) << json << held->log();
  EXPECT_EQ(number("live_samples"), number("samples")) << json;  // the client frees nothing
  EXPECT_EQ(summary.fields().at("file").string_value(), file);
  EXPECT_EQ(summary.fields().at("region").string_value(), "jobs");
  const std::string profile = read_text(file);
  EXPECT_EQ(number("bytes"), static_cast<double>(profile.size()));
  ASSERT_GT(profile.size(), 20u);
  EXPECT_EQ(profile.substr(0, 2), "\x1f\x8b") << "not gzip";

  // For people: one line on stderr; the default file name; stdout kept for
  // the profile with -o -.
  Result text = run_memdctl(daemon_.dir(), {"--socket", daemon_.socket(), "profile", "jobs", "--pid",
                                            std::to_string(held->pid())},
                            {}, daemon_.dir());
  ASSERT_EQ(text.exit_code, 0) << text;
  EXPECT_EQ(text.out, "");
  EXPECT_TRUE(std::regex_match(text.err, std::regex("profile of jobs: [1-9][0-9]* samples \\([1-9][0-9]* live\\), "
                                                    "[0-9.]+ (B|KiB|MiB) written to memd-jobs.pb.gz\n")))
      << text;
  EXPECT_EQ(read_text(daemon_.dir() + "/memd-jobs.pb.gz").substr(0, 2), "\x1f\x8b");
  Result piped = memdctl({"profile", "jobs", "-o", "-"});
  ASSERT_EQ(piped.exit_code, 0) << piped;
  EXPECT_EQ(piped.out.substr(0, 2), "\x1f\x8b");
  EXPECT_NE(piped.err.find("written to stdout"), std::string::npos) << piped;
}

TEST_F(MemdctlTest, ProfileErrors) {
  Result unknown = memdctl({"profile", "nosuch"});
  EXPECT_EQ(unknown.exit_code, 4) << unknown;
  EXPECT_EQ(unknown.err.rfind("memdctl: profile: NOT_FOUND: ", 0), 0u) << unknown;

  HeldClient held(daemon_, "jobs");
  ASSERT_TRUE(held.ready()) << held.log();
  Result unwritable = memdctl({"profile", "jobs", "-o", daemon_.dir() + "/no/such/dir/p.pb.gz"});
  EXPECT_EQ(unwritable.exit_code, 5) << unwritable;
  EXPECT_EQ(unwritable.err.rfind("memdctl: profile: cannot write ", 0), 0u) << unwritable;
}

std::string not_running_message(const std::string& what) {
  return "memdctl: memd is not running (" + what +
         "); start it with 'make run' or 'memd', or pass --socket\n";
}

TEST_F(MemdctlTest, SaysWhenMemdIsNotRunning) {
  const std::string missing = daemon_.dir() + "/missing.sock";
  Result r = run_memdctl(daemon_.dir(), {"--socket", missing, "regions"});
  EXPECT_EQ(r.exit_code, 3) << r;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, not_running_message("no socket at " + missing));

  // Without --socket, $MEMD_SOCKET names the socket.
  Result from_env = run_memdctl(daemon_.dir(), {"stats"}, {"MEMD_SOCKET=" + missing});
  EXPECT_EQ(from_env.exit_code, 3) << from_env;
  EXPECT_EQ(from_env.err, not_running_message("no socket at " + missing));

  // A socket file nobody listens on, as a crashed daemon leaves it.
  const std::string stale = daemon_.dir() + "/stale.sock";
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, stale.c_str(), sizeof address.sun_path - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0) << std::strerror(errno);
  close(fd);
  Result refused = run_memdctl(daemon_.dir(), {"--socket", stale, "clients"});
  EXPECT_EQ(refused.exit_code, 3) << refused;
  EXPECT_EQ(refused.err, not_running_message("nothing answers at " + stale));

  // The daemon stopped: it took its socket with it.
  EXPECT_EQ(daemon_.stop(), 0);
  Result stopped = memdctl({"stats"});
  EXPECT_EQ(stopped.exit_code, 3) << stopped;
  EXPECT_EQ(stopped.err, not_running_message("no socket at " + daemon_.socket()));
}

TEST_F(MemdctlTest, ADaemonThatDoesNotAnswerMissesTheDeadline) {
  // Stopped, the daemon's socket still accepts connections (the kernel
  // queues them) but nothing answers a call.
  ASSERT_EQ(kill(daemon_.pid(), SIGSTOP), 0);
  Result r = memdctl({"--timeout", "0.5", "stats"});
  ASSERT_EQ(kill(daemon_.pid(), SIGCONT), 0);
  EXPECT_EQ(r.exit_code, 4) << r;
  EXPECT_EQ(r.err.rfind("memdctl: stats: DEADLINE_EXCEEDED: ", 0), 0u) << r;
  EXPECT_NE(r.err.find("--timeout"), std::string::npos) << r;
  // Awake again, it answers.
  Result awake = memdctl({"stats"});
  EXPECT_EQ(awake.exit_code, 0) << awake;
}

TEST_F(MemdctlTest, BadUsageExitsTwoWithTheUsageText) {
  const std::vector<std::vector<std::string>> bad = {
      {},
      {"frobnicate"},
      {"stat"},
      {"stat", "a", "b"},
      {"regions", "extra"},
      {"drain"},
      {"drain", "12x"},
      {"drain", "-5"},
      {"regions", "--region", "jobs"},
      {"--timeout", "abc", "stats"},
      {"--timeout", "0", "stats"},
      {"--bogus", "regions"},
      {"stats", "--socket"},
      {"profile"},
      {"profile", "jobs", "--pid", "x"},
      {"profile", "jobs", "-o"},
      {"regions", "-o", "file"},
      {"stats", "--pid", "1"},
  };
  for (const std::vector<std::string>& args : bad) {
    Result r = memdctl(args);
    std::string shown;
    for (const std::string& a : args) shown += " " + a;
    EXPECT_EQ(r.exit_code, 2) << "memdctl" << shown << "\n" << r;
    EXPECT_EQ(r.out, "") << "memdctl" << shown;
    EXPECT_EQ(r.err.rfind("memdctl: ", 0), 0u) << "memdctl" << shown << "\n" << r;
    EXPECT_NE(r.err.find(kUsageLine), std::string::npos) << "memdctl" << shown << "\n" << r;
  }
  // Usage errors are found before any call: this stats call is the first
  // the daemon has served.
  Result json = memdctl({"--json", "stats"});
  ASSERT_EQ(json.exit_code, 0) << json;
  EXPECT_EQ(parse_json<v1::StatsResponse>(json.out).rpcs(), 1u) << json;
}

TEST_F(MemdctlTest, HelpPrintsTheUsageOnStdout) {
  for (const char* flag : {"--help", "-h"}) {
    Result r = run_memdctl(daemon_.dir(), {flag});
    EXPECT_EQ(r.exit_code, 0) << r;
    EXPECT_EQ(r.err, "");
    EXPECT_EQ(r.out.rfind(kUsageLine, 0), 0u) << r;
    for (const char* command :
         {"regions", "stat", "clients", "check", "compact", "drain", "stats", "remove", "profile"}) {
      EXPECT_NE(r.out.find(std::string("\n  ") + command + " "), std::string::npos) << command;
    }
  }
}

// memdctl file: a region file with no daemon, in a directory of its own.
class MemdctlFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/memdctl-file-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/jobs.region";
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  Result file(std::vector<std::string> args) {
    args.insert(args.begin(), "file");
    return run_memdctl(dir_, args);
  }
  // A region file with 100 objects and two roots, closed cleanly.
  void make_region() {
    RegionOptions o;
    o.discipline = Discipline::kFile;
    o.max_bytes = size_t{32} << 20;
    auto r = Region::create(path_, o);
    ASSERT_TRUE(r.ok()) << r.status();
    for (int i = 0; i < 100; ++i) ASSERT_NE((*r)->alloc(64 + i), nullptr);
    bool made = false;
    ASSERT_NE((*r)->root_bytes("config", 128, &made), nullptr);
    ASSERT_NE((*r)->root_bytes("index", 4096, &made), nullptr);
  }
  std::string header() {
    std::ifstream f(path_, std::ios::binary);
    std::string bytes(4096, '\0');
    f.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return bytes;
  }
  std::string dir_, path_;
};

TEST_F(MemdctlFileTest, InfoRootsAndCheckReadAStoppedRegion) {
  make_region();
  std::string before = header();
  Result info = file({"info", path_});
  ASSERT_EQ(info.exit_code, 0) << info;
  EXPECT_NE(info.out.find("method best"), std::string::npos) << info;
  EXPECT_NE(info.out.find("closed        cleanly"), std::string::npos) << info;
  EXPECT_NE(info.out.find("objects       102 live"), std::string::npos) << info;  // the roots are objects too
  EXPECT_NE(info.out.find("2 roots"), std::string::npos) << info;
  Result roots = file({"roots", path_});
  ASSERT_EQ(roots.exit_code, 0) << roots;
  EXPECT_TRUE(std::regex_search(roots.out, std::regex("\nconfig +[0-9]+ +128\n"))) << roots;
  EXPECT_TRUE(std::regex_search(roots.out, std::regex("\nindex +[0-9]+ +4096\n"))) << roots;
  Result check = file({"check", path_});
  EXPECT_EQ(check.exit_code, 0) << check;
  EXPECT_EQ(check.out, "check         ok\n") << check;
  EXPECT_EQ(header(), before) << "reading changed the file";
}

// --json: what scripts read, one object per command, the same facts.
TEST_F(MemdctlFileTest, JsonSaysTheSameForScripts) {
  make_region();
  Result info = file({"info", path_, "--json"});
  ASSERT_EQ(info.exit_code, 0) << info;
  auto facts = parse_json<google::protobuf::Struct>(info.out).fields();
  EXPECT_EQ(facts.at("file").string_value(), path_);
  EXPECT_EQ(facts.at("method").string_value(), "best");
  EXPECT_TRUE(facts.at("clean_close").bool_value());
  EXPECT_EQ(facts.at("objects").number_value(), 102);
  EXPECT_EQ(facts.at("roots").number_value(), 2);
  EXPECT_GT(facts.at("committed_bytes").number_value(), 0);

  Result roots = file({"--json", "roots", path_});
  ASSERT_EQ(roots.exit_code, 0) << roots;
  auto list = parse_json<google::protobuf::Struct>(roots.out).fields().at("roots").list_value();
  ASSERT_EQ(list.values_size(), 2) << roots;
  std::map<std::string, double> sizes;
  for (const auto& v : list.values()) {
    sizes[v.struct_value().fields().at("name").string_value()] = v.struct_value().fields().at("bytes").number_value();
    EXPECT_GT(v.struct_value().fields().at("offset").number_value(), 0);
  }
  EXPECT_EQ(sizes, (std::map<std::string, double>{{"config", 128}, {"index", 4096}}));

  Result check = file({"check", path_, "--json"});
  EXPECT_EQ(check.exit_code, 0) << check;
  auto verdict = parse_json<google::protobuf::Struct>(check.out).fields();
  EXPECT_TRUE(verdict.at("ok").bool_value());
  EXPECT_EQ(verdict.at("problem").string_value(), "");

  // Commands that print a report refuse --json rather than ignore it.
  Result repair = file({"repair", path_, "--json"});
  EXPECT_EQ(repair.exit_code, 2) << repair;
  EXPECT_NE(repair.err.find("--json belongs to file info, check and roots"), std::string::npos) << repair;
}

TEST_F(MemdctlFileTest, ARegionWithAnOwnerIsLeftAlone) {
  make_region();
  auto owner = Region::open(path_, Discipline::kFile);
  ASSERT_TRUE(owner.ok()) << owner.status();
  for (const char* verb : {"info", "check", "roots", "repair"}) {
    Result r = file({verb, path_});
    EXPECT_EQ(r.exit_code, 4) << verb << "\n" << r;
    EXPECT_NE(r.err.find("is open by its owner (pid " + std::to_string(getpid()) + ")"), std::string::npos) << r;
  }
  Result c = file({"copy", path_, dir_ + "/copy.region"});
  EXPECT_EQ(c.exit_code, 4) << c;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/copy.region"));
}

TEST_F(MemdctlFileTest, RepairShowsWhatRecoveryWouldDoThenDoesIt) {
  // An owner killed with its region open: not closed cleanly.
  pid_t pid = fork();
  if (pid == 0) {
    RegionOptions o;
    o.discipline = Discipline::kFile;
    o.max_bytes = size_t{32} << 20;
    auto r = Region::create(path_, o);
    if (!r.ok()) _exit(1);
    for (int i = 0; i < 1000; ++i) (*r)->alloc(48);
    bool made = false;
    (*r)->root_bytes("kept", 64, &made);
    (void)r->release();  // no close: as if killed
    _exit(0);
  }
  ASSERT_EQ(wait_exit(pid), 0);
  Result info = file({"info", path_});
  EXPECT_NE(info.out.find("NOT cleanly"), std::string::npos) << info;
  std::string before = header();
  Result shown = file({"repair", path_});
  EXPECT_EQ(shown.exit_code, 0) << shown;
  EXPECT_NE(shown.out.find("recovery      would rebuild the free lists"), std::string::npos) << shown;
  EXPECT_NE(shown.out.find("then check    ok"), std::string::npos) << shown;
  EXPECT_NE(shown.out.find("not done"), std::string::npos) << shown;
  EXPECT_EQ(header(), before) << "repair without --apply changed the file";
  for (const auto& e : std::filesystem::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename().string().find("memdctl-repair"), std::string::npos) << "scratch copy left behind";
  }
  Result applied = file({"repair", path_, "--apply"});
  EXPECT_EQ(applied.exit_code, 0) << applied;
  EXPECT_NE(applied.out.find("recovered     rebuilt the free lists"), std::string::npos) << applied;
  EXPECT_NE(header(), before);
  Result after = file({"info", path_});
  EXPECT_NE(after.out.find("closed        cleanly"), std::string::npos) << after;
  EXPECT_NE(after.out.find("recoveries 1"), std::string::npos) << after;
  EXPECT_NE(after.out.find("objects       1001 live"), std::string::npos) << after;  // and the root
}

TEST_F(MemdctlFileTest, CopyAndSnapshotMakeARegionFileOfTheirOwn) {
  make_region();
  std::string copy = dir_ + "/copy.region";
  Result c = file({"copy", path_, copy});
  ASSERT_EQ(c.exit_code, 0) << c;
  EXPECT_NE(c.out.find("the copy      ok"), std::string::npos) << c;
  EXPECT_EQ(std::filesystem::file_size(copy), std::filesystem::file_size(path_));
  Result roots = file({"roots", copy});
  EXPECT_NE(roots.out.find("config"), std::string::npos) << roots;
  Result again = file({"copy", path_, copy});  // never overwrites
  EXPECT_EQ(again.exit_code, 4) << again;
  EXPECT_NE(again.err.find("exists"), std::string::npos) << again;
  // A reflink where the file system has them; else a clear refusal and no file.
  std::string snap = dir_ + "/snap.region";
  Result s = file({"snapshot", path_, snap});
  if (s.exit_code == 0) {
    EXPECT_NE(s.out.find("reflinked"), std::string::npos) << s;
    EXPECT_NE(s.out.find("the copy      ok"), std::string::npos) << s;
  } else {
    EXPECT_EQ(s.exit_code, 4) << s;
    EXPECT_NE(s.err.find("cannot reflink"), std::string::npos) << s;
    EXPECT_FALSE(std::filesystem::exists(snap));
  }
}

// A root entry whose name length runs past its room (a client may write
// the table; so may a damaged disk) is passed over, not read past.
TEST_F(MemdctlFileTest, ARootWithAForgedNameLengthIsPassedOver) {
  make_region();
  {
    int fd = open(path_.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    void* m = mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    ASSERT_NE(m, MAP_FAILED);
    auto* h = static_cast<heap::RegionHeader*>(m);
    auto* roots = reinterpret_cast<heap::RootEntry*>(static_cast<char*>(m) + h->roots_offset);
    bool forged = false;
    for (uint32_t i = 0; i < h->max_roots && !forged; ++i) {
      if (std::string_view(roots[i].name, 6) == "config") roots[i].name_len = 0x7fffffff, forged = true;
    }
    munmap(m, 1 << 20);
    ASSERT_TRUE(forged);
  }
  Result roots = file({"roots", path_});
  EXPECT_EQ(roots.exit_code, 0) << roots;
  EXPECT_EQ(roots.out.find("config"), std::string::npos) << roots;
  EXPECT_NE(roots.out.find("index"), std::string::npos) << roots;
}

TEST_F(MemdctlFileTest, BadFilesAndArgumentsAreClearErrors) {
  make_region();
  std::filesystem::copy_file(path_, dir_ + "/cut.region");
  std::filesystem::resize_file(dir_ + "/cut.region", 4096);
  Result cut = file({"info", dir_ + "/cut.region"});
  EXPECT_EQ(cut.exit_code, 4) << cut;
  EXPECT_NE(cut.err.find("cut.region"), std::string::npos) << cut;
  std::ofstream(dir_ + "/text.region") << "not a region\n";
  Result text = file({"check", dir_ + "/text.region"});
  EXPECT_EQ(text.exit_code, 4) << text;
  Result missing = file({"info", dir_ + "/missing.region"});
  EXPECT_EQ(missing.exit_code, 4) << missing;
  EXPECT_EQ(file({"frobnicate", path_}).exit_code, 2);
  EXPECT_EQ(file({"copy", path_}).exit_code, 2);
  EXPECT_EQ(file({"info", path_, "--apply"}).exit_code, 2);
  EXPECT_EQ(file({"info"}).exit_code, 2);
}

}  // namespace
}  // namespace memd
