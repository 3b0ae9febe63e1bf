#include "tools/memdctl/file_commands.h"

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/struct.pb.h"
#include "region/region.h"
#include "tools/memdctl/commands.h"
#include "tools/memdctl/file_copy.h"
#include "tools/memdctl/output.h"

namespace memd::memdctl {
namespace {

int fail(const std::string& what, const absl::Status& s) {
  std::fprintf(stderr, "memdctl: file %s: %s\n", what.c_str(), std::string(s.message()).c_str());
  return kExitCallFailed;
}

// --json: one object per command, built as a protobuf Struct so that
// to_json escapes and formats it as the daemon's answers are.
using JsonObject = google::protobuf::Struct;
void put(JsonObject& o, const std::string& key, const std::string& v) { (*o.mutable_fields())[key].set_string_value(v); }
void put(JsonObject& o, const std::string& key, double v) { (*o.mutable_fields())[key].set_number_value(v); }
void put_bool(JsonObject& o, const std::string& key, bool v) { (*o.mutable_fields())[key].set_bool_value(v); }

int print_json(const JsonObject& o, int code) {
  absl::StatusOr<std::string> text = to_json(o);
  if (!text.ok()) return fail("--json", text.status());
  std::printf("%s\n", text->c_str());
  return code;
}

int info_json(Region& r, const std::string& path) {
  Region::HeaderFacts f = r.header_facts();
  uint32_t held = 0;
  for (uint32_t i = 0; i < f.max_clients; ++i) held += r.lease_slot(i).active;
  heap::RegionStats s = r.stat();
  JsonObject o;
  put(o, "file", path);
  put(o, "format_version", f.format_version);
  put(o, "method", method_name(r.method()));
  put(o, "max_pages", static_cast<double>(f.max_pages));
  put(o, "committed_bytes", static_cast<double>(f.committed_bytes));
  put_bool(o, "clean_close", f.clean_close);
  put(o, "generation", static_cast<double>(f.generation));
  put(o, "recoveries", static_cast<double>(f.recoveries));
  put(o, "leaked_objects", static_cast<double>(f.leaked_objects));
  put(o, "leases_held", held);
  put(o, "lease_slots", f.max_clients);
  put(o, "objects", static_cast<double>(s.busy_objects));
  put(o, "object_bytes", static_cast<double>(s.busy_bytes));
  put(o, "roots", static_cast<double>(r.list().size()));
  put(o, "pages_in_use", static_cast<double>(s.pages_in_use));
  put(o, "pages_free_resident", static_cast<double>(s.pages_dirty));
  put(o, "pages_given_back", static_cast<double>(s.pages_discarded));
  return print_json(o, kExitOk);
}

// A region file's facts, whatever opened it.
void print_facts(const Region& r, const std::string& path) {
  Region::HeaderFacts f = r.header_facts();
  uint32_t held = 0;
  for (uint32_t i = 0; i < f.max_clients; ++i) held += r.lease_slot(i).active;
  std::printf("region file   %s\n", path.c_str());
  std::printf("format        version %u, method %s\n", f.format_version, method_name(r.method()));
  std::printf("reservation   %llu pages; %llu bytes backed\n", static_cast<unsigned long long>(f.max_pages),
              static_cast<unsigned long long>(f.committed_bytes));
  std::printf("closed        %s\n", f.clean_close ? "cleanly"
                                                  : "NOT cleanly: its owner crashed (the next open recovers it; "
                                                    "'memdctl file repair' shows how)");
  std::printf("generation    %llu (recoveries %llu, objects lost to crashes %llu)\n",
              static_cast<unsigned long long>(f.generation), static_cast<unsigned long long>(f.recoveries),
              static_cast<unsigned long long>(f.leaked_objects));
  std::printf("leases        %u of %u slots held\n", held, f.max_clients);
}

void print_use(Region& r) {
  heap::RegionStats s = r.stat();
  std::printf("objects       %zu live (%zu bytes); %zu roots\n", s.busy_objects, s.busy_bytes, r.list().size());
  std::printf("pages         %zu in use, %zu free and resident, %zu given back\n", s.pages_in_use, s.pages_dirty,
              s.pages_discarded);
}

// "check ok" or "check FAILED: why"; whether it passed.
bool print_check(Region& r, const char* label) {
  absl::Status s = r.check();
  std::printf("%-13s %s%s\n", label, s.ok() ? "ok" : "FAILED: ", s.ok() ? "" : std::string(s.message()).c_str());
  return s.ok();
}

int info(const std::string& path, bool json) {
  absl::StatusOr<std::unique_ptr<Region>> r = Region::inspect(path, Discipline::kFile);
  if (!r.ok()) return fail("info", r.status());
  if (json) return info_json(**r, path);
  print_facts(**r, path);
  print_use(**r);
  return kExitOk;
}

int check(const std::string& path, bool json) {
  absl::StatusOr<std::unique_ptr<Region>> r = Region::inspect(path, Discipline::kFile);
  if (!r.ok()) return fail("check", r.status());
  if (json) {
    absl::Status s = (*r)->check();
    JsonObject o;
    put(o, "file", path);
    put_bool(o, "clean_close", (*r)->header_facts().clean_close);
    put_bool(o, "ok", s.ok());
    put(o, "problem", std::string(s.message()));
    return print_json(o, s.ok() ? kExitOk : kExitCheckFailed);
  }
  if (!(*r)->header_facts().clean_close) {
    std::printf("note          not closed cleanly: the derived state (free lists, counts) is checked as the crash "
                "left it; 'memdctl file repair' shows the region as recovery makes it\n");
  }
  return print_check(**r, "check") ? kExitOk : kExitCheckFailed;
}

int roots(const std::string& path, bool json) {
  absl::StatusOr<std::unique_ptr<Region>> r = Region::inspect(path, Discipline::kFile);
  if (!r.ok()) return fail("roots", r.status());
  if (json) {
    JsonObject o;
    put(o, "file", path);
    google::protobuf::ListValue* list = (*o.mutable_fields())["roots"].mutable_list_value();
    for (const RootInfo& root : (*r)->list()) {
      JsonObject* entry = list->add_values()->mutable_struct_value();
      put(*entry, "name", root.name);
      put(*entry, "offset", static_cast<double>(root.offset));
      put(*entry, "bytes", static_cast<double>(root.size));
    }
    return print_json(o, kExitOk);
  }
  std::printf("%-32s %16s %12s\n", "NAME", "OFFSET", "BYTES");
  for (const RootInfo& root : (*r)->list()) {
    std::printf("%-32s %16llu %12llu\n", root.name.c_str(), static_cast<unsigned long long>(root.offset),
                static_cast<unsigned long long>(root.size));
  }
  return kExitOk;
}

// Opens `path` as its owner, which recovers it, and says what changed from
// `before`; closes it cleanly.
int recover_and_report(const std::string& path, const Region::HeaderFacts& before, bool would) {
  absl::StatusOr<std::unique_ptr<Region>> r = Region::open(path, Discipline::kFile);
  if (!r.ok()) return fail("repair", r.status());
  Region::HeaderFacts after = (*r)->header_facts();
  std::printf("%-13s %s the %s; objects lost to the crash: %llu; generation %llu -> %llu\n",
              would ? "recovery" : "recovered", would ? "would rebuild" : "rebuilt",
              before.clean_close ? "derived state of a cleanly closed region (nothing is lost)"
                                 : "free lists, block lists and counts the crash left",
              static_cast<unsigned long long>(after.leaked_objects - before.leaked_objects),
              static_cast<unsigned long long>(before.generation), static_cast<unsigned long long>(after.generation));
  bool ok = print_check(**r, "then check");
  print_use(**r);
  return ok ? kExitOk : kExitCheckFailed;
}

int repair(const std::string& path, bool apply) {
  absl::StatusOr<std::unique_ptr<Region>> view = Region::inspect(path, Discipline::kFile);
  if (!view.ok()) return fail("repair", view.status());
  Region::HeaderFacts before = (*view)->header_facts();
  std::printf("closed        %s\n", before.clean_close ? "cleanly" : "NOT cleanly: its owner crashed");
  print_check(**view, "as it is");
  if (apply) {
    view->reset();  // the shared lock goes: recovery takes the owner's
    return recover_and_report(path, before, false);
  }
  // What recovery would do, on a scratch copy beside the file (a reflink
  // where the file system can), removed after. The view's shared lock keeps
  // an owner from starting to write the file while it is copied.
  std::string scratch = absl::StrCat(path, ".memdctl-repair-", getpid());
  absl::StatusOr<CopyResult> copied = copy_region_file(path, scratch, false);
  view->reset();
  if (!copied.ok()) return fail("repair", copied.status());
  int code = recover_and_report(scratch, before, true);
  unlink(scratch.c_str());
  std::printf("not done      the file is unchanged; 'memdctl file repair %s --apply' does it\n", path.c_str());
  return code;
}

int copy(const std::string& from, const std::string& to, bool reflink_only) {
  const char* what = reflink_only ? "snapshot" : "copy";
  {
    // Held while copying: no owner can start writing the file meanwhile.
    absl::StatusOr<std::unique_ptr<Region>> r = Region::inspect(from, Discipline::kFile);
    if (!r.ok()) return fail(what, r.status());
    absl::StatusOr<CopyResult> c = copy_region_file(from, to, reflink_only);
    if (!c.ok()) return fail(what, c.status());
    std::printf("%s %s to %s: %s, %llu of %llu bytes\n", reflink_only ? "snapshot of" : "copied", from.c_str(),
                to.c_str(), c->reflinked ? "reflinked (blocks shared until either is written)" : "data copied",
                static_cast<unsigned long long>(c->data_bytes), static_cast<unsigned long long>(c->file_bytes));
  }
  absl::StatusOr<std::unique_ptr<Region>> made = Region::inspect(to, Discipline::kFile);
  if (!made.ok()) return fail(what, made.status());
  std::printf("roots         %zu\n", (*made)->list().size());
  return print_check(**made, "the copy") ? kExitOk : kExitCheckFailed;
}

}  // namespace

int run_file(const CommandLine& cl) {
  const std::string& verb = cl.args[0];
  const std::string& path = cl.args[1];
  bool two = cl.args.size() == 3;
  if ((verb == "copy" || verb == "snapshot") != two) {
    std::fprintf(stderr, "memdctl: file %s: %s\n", verb.c_str(),
                 two ? "takes one file" : "takes the region file and where its copy goes");
    return kExitUsage;
  }
  if (cl.apply && verb != "repair") {
    std::fprintf(stderr, "memdctl: file %s: --apply belongs to file repair\n", verb.c_str());
    return kExitUsage;
  }
  if (cl.json && verb != "info" && verb != "check" && verb != "roots") {
    std::fprintf(stderr, "memdctl: file %s: --json belongs to file info, check and roots\n", verb.c_str());
    return kExitUsage;
  }
  if (verb == "info") return info(path, cl.json);
  if (verb == "check") return check(path, cl.json);
  if (verb == "roots") return roots(path, cl.json);
  if (verb == "repair") return repair(path, cl.apply);
  if (verb == "copy") return copy(path, cl.args[2], false);
  if (verb == "snapshot") return copy(path, cl.args[2], true);
  std::fprintf(stderr, "memdctl: file: unknown action \"%s\" (info, check, roots, repair, copy, snapshot)\n",
               verb.c_str());
  return kExitUsage;
}

}  // namespace memd::memdctl
