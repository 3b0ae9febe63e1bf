#include "daemon/region_registry.h"

#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/clock.h"
#include "daemon/log.h"
#include "daemon/retryable_call.h"
#include "heap/crash_point.h"
#include "disciplines/shared_source.h"

namespace memd::daemon {
namespace {

// Whether this daemon may give an object to its client (chown): root, or a
// daemon run as its own user with CAP_CHOWN (the unit's memd user). Asked of
// the kernel once; an unprivileged per-user daemon never tries.
bool may_give_objects_away() {
  static const bool kMay = [] {
    if (geteuid() == 0) return true;
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3]{};
    if (syscall(SYS_capget, &header, data) != 0) return false;
    return (data[CAP_TO_INDEX(CAP_CHOWN)].effective & CAP_TO_MASK(CAP_CHOWN)) != 0;
  }();
  return kMay;
}

std::string octal(uint32_t mode) { return absl::StrCat("0", mode >> 6 & 7, mode >> 3 & 7, mode & 7); }

}  // namespace

std::string object_os_path(const CatalogRecord& r) {
  return r.discipline == Discipline::kShm ? absl::StrCat("/dev/shm/memd.", r.object) : r.object;
}

absl::Status check_access(const CatalogRecord& r, const Peer& who, bool write) {
  if (who.uid == 0) return absl::OkStatus();
  uint32_t bits = who.uid == r.owner_uid ? r.mode >> 6 & 7 : who.gid == r.owner_gid ? r.mode >> 3 & 7 : r.mode & 7;
  uint32_t need = write ? 6 : 4;
  if ((bits & need) == need) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat("uid ", who.uid, " may not ", write ? "allocate in" : "read",
                                                  " region \"", r.name, "\" (owner uid ", r.owner_uid, ", gid ",
                                                  r.owner_gid, ", mode ", octal(r.mode), ")"));
}

namespace {
std::atomic<uint64_t> damaged_total{0};
std::atomic<uint64_t> header_repairs_total{0};
}  // namespace

uint64_t regions_damaged_total() { return damaged_total.load(std::memory_order_relaxed); }
uint64_t region_header_repairs_total() { return header_repairs_total.load(std::memory_order_relaxed); }

absl::Status ServedRegion::usable() {
  if (!damage.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("region \"", record.name, "\" is damaged and not served (", damage,
                                                      "); its owner or root may remove it"));
  }
  if (owner == nullptr) return absl::NotFoundError(absl::StrCat("region \"", record.name, "\" was removed"));
  bool repaired = false;
  absl::Status s = owner->repair_backing(&repaired);
  if (repaired && s.ok()) {
    // A process that maps the region wrote over its header; the owner's copy
    // put it back, and the region is served on.
    header_repairs_total.fetch_add(1, std::memory_order_relaxed);
    log_warning("region \"", record.name, "\": its header was overwritten; restored from the daemon's copy");
  }
  if (!s.ok()) {
    mark_damaged(s.message());
    return usable();
  }
  return absl::OkStatus();
}

void ServedRegion::mark_damaged(absl::string_view why) {
  if (!damage.empty()) return;
  damage = std::string(why);
  damaged.store(true, std::memory_order_release);
  damaged_total.fetch_add(1, std::memory_order_relaxed);
  log_error("region \"", record.name, "\" is damaged and no longer served: ", damage);
  if (owner != nullptr) {
    owner->mark_damaged();
    owner.reset();
  }
}

std::shared_ptr<ServedRegion> RegionRegistry::add_locked(CatalogRecord record, std::unique_ptr<Region> region,
                                                         bool fresh) {
  auto s = std::make_shared<ServedRegion>();
  s->handle = static_cast<uint32_t>(regions_.size() + 1);
  s->record = std::move(record);
  s->owner = std::move(region);
  // Its object counts against its owner's bytes from now on, as it is and
  // as it grows (a damaged region's object still takes its space).
  s->bytes_account = uid_bytes_.account(s->record.owner_uid);
  struct stat st;
  if (::stat(object_os_path(s->record).c_str(), &st) == 0) UidBytes::add(s->bytes_account, st.st_size);
  if (s->owner != nullptr) {
    s->owner->set_length_policy(UidBytes::policy, s->bytes_account);
    absl::StatusOr<std::unique_ptr<LeaseJournal>> j = LeaseJournal::open(
        catalog_->journal_path(s->record.name), s->owner->header_facts().max_clients, fresh);
    if (j.ok()) {
      s->journal = std::move(*j);
    } else {
      log_warning("region \"", s->record.name, "\": ", j.status().message(),
                  "; its lease calls are applied each time they arrive, retries too");
    }
  }
  regions_.push_back(s);
  return s;
}

void RegionRegistry::load_all(std::vector<KeptLease>* kept) {
  absl::StatusOr<std::vector<CatalogRecord>> records = catalog_->load();
  if (!records.ok()) {
    log_error(records.status().message());
    return;
  }
  std::lock_guard<std::mutex> g(mu_);
  for (CatalogRecord& r : *records) {
    if (r.creating) {
      // A crash during its create: nobody was ever told it exists.
      absl::Status gone = Region::remove(r.object, r.discipline);
      log_warning("region \"", r.name, "\" was being created when the daemon stopped: its object ",
                  gone.ok() ? "is removed" : "was not made", " and its name is free");
      (void)catalog_->erase(r.name);
      continue;
    }
    std::vector<Region::KeptLease> live;
    absl::StatusOr<std::unique_ptr<Region>> region =
        Region::open_keeping_clients(r.object, r.discipline, r.method, &live);
    if (!region.ok()) {
      // Listed, removable and counted, but not served: a region refused at
      // start must not exist only in the log.
      std::shared_ptr<ServedRegion> s = add_locked(std::move(r), nullptr, false);
      std::lock_guard<std::mutex> rg(s->lock);
      s->mark_damaged(absl::StrCat("cannot be opened: ", region.status().message()));
      continue;
    }
    if (absl::Status backing = (*region)->backing_status(); !backing.ok()) {
      std::shared_ptr<ServedRegion> s = add_locked(std::move(r), std::move(*region), false);
      std::lock_guard<std::mutex> rg(s->lock);
      s->mark_damaged(absl::StrCat("recovery at start: ", backing.message()));
      continue;
    }
    Region::HeaderFacts h = (*region)->header_facts();
    log_info("region \"", r.name, "\" (", discipline_name(r.discipline), ", ", r.object, ") opened: generation ",
             h.generation, ", recoveries ", h.recoveries, ", leaked objects ", h.leaked_objects, ", ",
             live.size(), " client(s) of the previous daemon still running");
    std::shared_ptr<ServedRegion> s = add_locked(std::move(r), std::move(*region), false);
    {
      std::lock_guard<std::mutex> rg(s->lock);
      finish_interrupted_call(*s);
    }
    for (const Region::KeptLease& l : live) kept->push_back(KeptLease{s, l});
  }
}

absl::StatusOr<std::shared_ptr<ServedRegion>> RegionRegistry::open(const OpenArgs& args, const Peer& who,
                                                                   bool* created) {
  *created = false;
  if (absl::Status s = disciplines::validate_region_name(args.name); !s.ok()) return s;
  std::lock_guard<std::mutex> g(mu_);
  std::shared_ptr<ServedRegion> found;
  for (const auto& r : regions_) {
    if (r && r->record.name == args.name) found = r;
  }
  if (found == nullptr) {
    if (!args.create) return absl::NotFoundError(absl::StrCat("no region named \"", args.name, "\""));
    absl::StatusOr<std::shared_ptr<ServedRegion>> made = create_locked(args, who);
    if (made.ok()) *created = true;
    return made;
  }
  const CatalogRecord& r = found->record;
  if (found->damaged.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> rg(found->lock);
    return found->usable();
  }
  if (args.create && args.exclusive) {
    return absl::AlreadyExistsError(absl::StrCat("region \"", args.name, "\" exists"));
  }
  if (args.discipline != Discipline{} && args.discipline != r.discipline) {
    return absl::FailedPreconditionError(absl::StrCat("region \"", args.name, "\" is a ",
                                                      discipline_name(r.discipline), " region, not ",
                                                      discipline_name(args.discipline)));
  }
  if (args.method != Method{} && args.method != r.method) {
    return absl::FailedPreconditionError(absl::StrCat("region \"", args.name, "\" is managed by method ",
                                                      method_name(r.method), ", not ", method_name(args.method)));
  }
  if (absl::Status s = check_access(r, who, !args.read_only); !s.ok()) return s;
  return found;
}

absl::StatusOr<std::shared_ptr<ServedRegion>> RegionRegistry::create_locked(const OpenArgs& args, const Peer& who) {
  size_t live = 0;
  for (const auto& r : regions_) live += r != nullptr;
  if (live >= config_.max_regions) {
    return absl::ResourceExhaustedError(absl::StrCat("the daemon serves ", live, " regions, its limit (max-regions)"));
  }
  if (args.discipline == Discipline{}) {
    return absl::InvalidArgumentError("creating a region needs a discipline (shm, file or pmem)");
  }
  if (args.discipline != Discipline::kShm && args.discipline != Discipline::kFile &&
      args.discipline != Discipline::kPmem) {
    return absl::InvalidArgumentError(absl::StrCat("unknown discipline ", static_cast<uint32_t>(args.discipline)));
  }
  if (args.max_bytes > config_.max_region_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("max_bytes ", args.max_bytes, " is above the daemon's limit of ",
                                                   config_.max_region_bytes, " (max-region-bytes)"));
  }
  if (args.mode > 0777) return absl::InvalidArgumentError(absl::StrCat("mode ", args.mode, " is not a permission mode"));
  if (!uid_bytes_.under_limit(who.uid)) {
    UidBytes::Account* a = uid_bytes_.account(who.uid);
    return absl::ResourceExhaustedError(absl::StrCat("uid ", who.uid, " owns ", a->used.load(), " bytes of regions, its limit (max-bytes-per-uid ", a->limit, ")"));
  }
  CatalogRecord rec;
  rec.name = args.name;
  rec.discipline = args.discipline;
  rec.method = args.method == Method{} ? Method::kBest : args.method;
  rec.object = args.discipline == Discipline::kShm
                   ? (config_.shm_namespace.empty() ? args.name : absl::StrCat(config_.shm_namespace, ".", args.name))
                   : catalog_->region_path(args.name, args.discipline);
  rec.owner_uid = who.uid;
  rec.owner_gid = who.gid;
  rec.mode = args.mode == 0 ? 0600 : args.mode;
  rec.max_bytes = args.max_bytes == 0 ? config_.region_bytes : args.max_bytes;
  rec.created_ms = wall_ms();

  RegionOptions o;
  o.discipline = rec.discipline;
  o.method = rec.method;
  o.max_bytes = rec.max_bytes;
  o.max_clients = args.max_clients == 0 ? config_.region_clients : args.max_clients;
  o.max_threads = args.max_threads == 0 ? config_.region_threads : args.max_threads;
  o.mode = rec.mode;
  o.owner_allocates = false;  // the daemon only serves leases
  // The intent first: a crash from here on leaves a record that says the
  // object may be half made, never an object no record names (which would
  // refuse every later create of the name).
  rec.creating = true;
  if (absl::Status s = catalog_->save(rec); !s.ok()) return s;
  rec.creating = false;
  heap::crash_point("daemon.create_intent");
  absl::StatusOr<std::unique_ptr<Region>> region = Region::create(rec.object, o);
  if (!region.ok()) {
    (void)catalog_->erase(rec.name);
    return region.status();
  }
  // The object carries the region's owner and mode, so that the kernel
  // agrees with the daemon about who may map it.
  std::string path = object_os_path(rec);
  if (may_give_objects_away() && chown(path.c_str(), rec.owner_uid, rec.owner_gid) != 0) {
    log_warning("cannot chown ", path, ": ", std::strerror(errno));
  }
  if (chmod(path.c_str(), rec.mode) != 0) log_warning("cannot chmod ", path, ": ", std::strerror(errno));
  heap::crash_point("daemon.create");  // the object made, not yet in the catalog
  if (absl::Status s = catalog_->save(rec); !s.ok()) {
    region->reset();
    (void)Region::remove(rec.object, rec.discipline);
    (void)catalog_->erase(rec.name);
    return s;
  }
  log_info("region \"", rec.name, "\" created: ", discipline_name(rec.discipline), " ", rec.object, ", ",
           rec.max_bytes, " bytes reserved, owner uid ", rec.owner_uid, ", mode ", octal(rec.mode));
  return add_locked(std::move(rec), std::move(*region), true);
}

std::shared_ptr<ServedRegion> RegionRegistry::find(uint32_t handle) const {
  std::lock_guard<std::mutex> g(mu_);
  if (handle == 0 || handle > regions_.size()) return nullptr;
  return regions_[handle - 1];
}

std::shared_ptr<ServedRegion> RegionRegistry::find(std::string_view name) const {
  std::lock_guard<std::mutex> g(mu_);
  for (const auto& r : regions_) {
    if (r && r->record.name == name) return r;
  }
  return nullptr;
}

std::vector<std::shared_ptr<ServedRegion>> RegionRegistry::list() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<std::shared_ptr<ServedRegion>> out;
  for (const auto& r : regions_) {
    if (r) out.push_back(r);
  }
  return out;
}

absl::Status RegionRegistry::remove(std::string_view name, const Peer& who) {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& r : regions_) {
    if (!r || r->record.name != name) continue;
    if (who.uid != 0 && who.uid != r->record.owner_uid) {
      return absl::PermissionDeniedError(absl::StrCat("only its owner (uid ", r->record.owner_uid,
                                                      ") or root may remove region \"", std::string(name), "\""));
    }
    CatalogRecord rec = r->record;
    uint64_t length = 0;  // what its object takes of its owner's bytes
    {
      // Under the lock attach() counts under: no client attaches meanwhile.
      std::lock_guard<std::mutex> rg(r->lock);
      if (uint32_t holders = r->attached.load(); holders != 0) {
        return absl::FailedPreconditionError(absl::StrCat("region \"", std::string(name), "\" is in use by ", holders,
                                                          " client(s) (attached, or waiting to resume)"));
      }
      struct stat st;
      if (::stat(object_os_path(rec).c_str(), &st) == 0) length = static_cast<uint64_t>(st.st_size);
      r->owner.reset();
    }
    UidBytes::remove(r->bytes_account, length);
    r.reset();
    if (absl::Status s = Region::remove(rec.object, rec.discipline); !s.ok() && !absl::IsNotFound(s)) return s;
    log_info("region \"", rec.name, "\" removed by uid ", who.uid);
    return catalog_->erase(rec.name);
  }
  return absl::NotFoundError(absl::StrCat("no region named \"", std::string(name), "\""));
}

void RegionRegistry::close_all(bool checkpoint) {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& r : regions_) {
    if (!r) continue;
    std::lock_guard<std::mutex> rg(r->lock);
    if (r->owner == nullptr) continue;  // damaged
    if (checkpoint && r->record.discipline != Discipline::kShm) {
      if (absl::Status s = r->owner->checkpoint(); !s.ok()) log_warning("checkpoint of ", r->record.name, ": ", s.message());
    }
    r->owner.reset();
    log_info("region \"", r->record.name, "\" closed");
  }
  regions_.clear();
}

}  // namespace memd::daemon
