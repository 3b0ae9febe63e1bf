#include "daemon/catalog.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/log.h"

namespace memd::daemon {
namespace {
constexpr char kSuffix[] = ".region.conf";

// A record's discipline or method: one that names something (not 0).
template <class E>
bool set_from(std::optional<E> v, E* out) {
  if (!v || *v == E{}) return false;
  *out = *v;
  return true;
}
}  // namespace

Catalog::Catalog(std::string data_dir) : data_dir_(std::move(data_dir)) {}

absl::Status Catalog::init() {
  for (const std::string& d : {data_dir_, data_dir_ + "/catalog", data_dir_ + "/regions", data_dir_ + "/journal"}) {
    std::error_code ec;
    std::filesystem::create_directories(d, ec);
    if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", d, ": ", ec.message()));
  }
  // Clients open region files by path: they must reach regions/ (each
  // file's own mode then decides); nobody else needs the catalog.
  chmod((data_dir_ + "/regions").c_str(), 0755);
  chmod((data_dir_ + "/catalog").c_str(), 0700);
  chmod((data_dir_ + "/journal").c_str(), 0700);
  return absl::OkStatus();
}

std::string Catalog::record_path(const std::string& name) const {
  return absl::StrCat(data_dir_, "/catalog/", name, kSuffix);
}

std::string Catalog::journal_path(const std::string& name) const {
  return absl::StrCat(data_dir_, "/journal/", name, ".journal");
}

std::string Catalog::region_path(const std::string& name, Discipline d) const {
  std::string abs = std::filesystem::absolute(data_dir_).lexically_normal().string();
  return absl::StrCat(abs, "/regions/", name, d == Discipline::kPmem ? ".pmem" : ".region");
}

absl::Status Catalog::save(const CatalogRecord& r) const {
  std::string path = record_path(r.name);
  std::string tmp = path + ".tmp";
  std::string text = absl::StrCat("name = ", r.name, "\ndiscipline = ", static_cast<uint32_t>(r.discipline),
                                  "\nmethod = ", static_cast<uint32_t>(r.method), "\nobject = ", r.object,
                                  "\nowner_uid = ", r.owner_uid, "\nowner_gid = ", r.owner_gid, "\nmode = ", r.mode,
                                  "\nmax_bytes = ", r.max_bytes, "\ncreated_ms = ", r.created_ms, "\n",
                                  r.creating ? "creating = 1\n" : "");
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && fsync(fd) == 0;
  close(fd);
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status Catalog::erase(const std::string& name) const {
  if (unlink(record_path(name).c_str()) != 0 && errno != ENOENT) {
    return absl::UnavailableError(absl::StrCat("cannot remove ", record_path(name), ": ", std::strerror(errno)));
  }
  // The answers kept for the region's clients go with it.
  (void)unlink(journal_path(name).c_str());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CatalogRecord>> Catalog::load() const {
  std::vector<CatalogRecord> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(data_dir_ + "/catalog", ec)) {
    std::string file = entry.path().string();
    if (!file.ends_with(kSuffix)) continue;
    std::ifstream in(file);
    CatalogRecord r;
    std::string line;
    bool bad = false;
    while (std::getline(in, line)) {
      size_t eq = line.find(" = ");
      if (eq == std::string::npos) continue;
      std::string key = line.substr(0, eq), v = line.substr(eq + 3);
      uint64_t n = 0;
      bool num = absl::SimpleAtoi(v, &n);
      if (key == "name") r.name = v;
      else if (key == "object") r.object = v;
      else if (!num) bad = true;
      else if (key == "discipline") bad |= !set_from(discipline_from_number(n), &r.discipline);
      else if (key == "method") bad |= !set_from(method_from_number(n), &r.method);
      else if (key == "owner_uid") r.owner_uid = static_cast<uid_t>(n);
      else if (key == "owner_gid") r.owner_gid = static_cast<gid_t>(n);
      else if (key == "mode") r.mode = static_cast<uint32_t>(n);
      else if (key == "max_bytes") r.max_bytes = n;
      else if (key == "created_ms") r.created_ms = n;
      else if (key == "creating") r.creating = n != 0;
    }
    if (bad || r.name.empty() || r.object.empty()) {
      log_warning("catalog record ", file, " is malformed; its region is not served");
      continue;
    }
    out.push_back(std::move(r));
  }
  if (ec) return absl::UnavailableError(absl::StrCat("cannot read ", data_dir_, "/catalog: ", ec.message()));
  return out;
}

}  // namespace memd::daemon
