#include "tools/memdctl/profile_summary.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "pprof/profile.pb.h"

namespace memd::memdctl {
namespace {

namespace pprof = perftools::profiles;

struct Counts {
  int64_t n_alloc = 0, n_free = 0, s_alloc = 0, s_free = 0;
};

// "n_alloc=1:n_free=0:s_alloc=4:s_free=0:" (and anything after, such as
// the region total's max_busy and extent).
bool parse_counts(absl::string_view text, Counts* out) {
  std::map<absl::string_view, int64_t*> fields = {
      {"n_alloc", &out->n_alloc}, {"n_free", &out->n_free}, {"s_alloc", &out->s_alloc}, {"s_free", &out->s_free}};
  int seen = 0;
  for (absl::string_view field : absl::StrSplit(text, ':', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(field, absl::MaxSplits('=', 1));
    auto it = fields.find(kv.first);
    if (it == fields.end()) continue;
    if (!absl::SimpleAtoi(kv.second, it->second) || *it->second < 0) return false;
    ++seen;
  }
  return seen == 4 && out->n_free <= out->n_alloc && out->s_free <= out->s_alloc;
}

// The text as valid UTF-8 (a profile's strings must be: pprof's proto is
// proto3), each byte of a bad sequence written as \xNN. A file name or an
// object path from the summary may be any bytes.
std::string valid_utf8(absl::string_view s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    bool ok = len != 0 && i + len <= s.size();
    if (ok && len > 1) {
      uint32_t cp = c & (0x7F >> len);
      for (size_t k = 1; k < len && ok; ++k) {
        auto b = static_cast<unsigned char>(s[i + k]);
        ok = (b & 0xC0) == 0x80;
        cp = (cp << 6) | (b & 0x3F);
      }
      static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
      ok = ok && cp >= kMin[len] && cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF);
    }
    if (ok) {
      out.append(s.data() + i, len);
      i += len;
    } else {
      absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
      ++i;
    }
  }
  return out;
}

class Builder {
 public:
  Builder() {
    string_index("");
    add_type(profile_.add_sample_type(), "alloc_objects", "count");
    add_type(profile_.add_sample_type(), "alloc_space", "bytes");
    add_type(profile_.add_sample_type(), "inuse_objects", "count");
    add_type(profile_.add_sample_type(), "inuse_space", "bytes");
    profile_.set_default_sample_type(string_index("inuse_space"));
    add_type(profile_.mutable_period_type(), "space", "bytes");
    profile_.set_period(1);
    profile_.add_comment(string_index("memd profile method summary (exact counts)"));
  }

  // A site: a function named `name` (with `file` as its file name, empty
  // for a return address) at `line` (0: none).
  void add(const std::string& name, const std::string& file, int64_t line, const std::string& region, const Counts& c) {
    uint64_t function = function_id(name, file);
    pprof::Location* l = profile_.add_location();
    l->set_id(static_cast<uint64_t>(profile_.location_size()));
    pprof::Line* ln = l->add_line();
    ln->set_function_id(function);
    ln->set_line(line);
    pprof::Sample* s = profile_.add_sample();
    s->add_location_id(l->id());
    s->add_value(c.n_alloc);
    s->add_value(c.s_alloc);
    s->add_value(c.n_alloc - c.n_free);
    s->add_value(c.s_alloc - c.s_free);
    pprof::Label* label = s->add_label();
    label->set_key(string_index("region"));
    label->set_str(string_index(region));
  }

  std::string serialized() const { return profile_.SerializeAsString(); }

 private:
  int64_t string_index(const std::string& text) {
    std::string s = valid_utf8(text);
    auto [it, inserted] = strings_.try_emplace(s, profile_.string_table_size());
    if (inserted) profile_.add_string_table(s);
    return it->second;
  }

  void add_type(pprof::ValueType* t, const char* type, const char* unit) {
    t->set_type(string_index(type));
    t->set_unit(string_index(unit));
  }

  uint64_t function_id(const std::string& name, const std::string& file) {
    auto [it, inserted] = functions_.try_emplace(std::make_pair(name, file), profile_.function_size() + 1);
    if (inserted) {
      pprof::Function* f = profile_.add_function();
      f->set_id(it->second);
      f->set_name(string_index(name));
      f->set_system_name(f->name());
      f->set_filename(string_index(file));
    }
    return it->second;
  }

  pprof::Profile profile_;
  std::map<std::string, int64_t> strings_;
  std::map<std::pair<std::string, std::string>, uint64_t> functions_;
};

// "<key>:region=<region>:<counts>": the region (which may hold ':') ends
// where the counts start.
bool split_site(absl::string_view rest, std::string* region, Counts* counts) {
  if (!absl::ConsumePrefix(&rest, "region=")) return false;
  size_t at = rest.find(":n_alloc=");
  if (at == absl::string_view::npos) return false;
  *region = std::string(rest.substr(0, at));
  return parse_counts(rest.substr(at + 1), counts);
}

}  // namespace

absl::StatusOr<std::string> summary_to_pprof(absl::string_view summary) {
  Builder b;
  std::string file;  // of the site lines that follow ("<>": return addresses)
  bool any = false;
  int n = 0;
  for (absl::string_view line : absl::StrSplit(summary, '\n')) {
    ++n;
    if (line.empty()) continue;
    auto bad = [&](const char* what) {
      return absl::InvalidArgumentError(absl::StrCat("line ", n, ": ", what, ": \"", line.substr(0, 120), "\""));
    };
    std::string region;
    Counts c;
    absl::string_view rest = line;
    if (absl::StartsWith(line, "ALLOCATION USAGE SUMMARY:")) {
      any = true;
    } else if (absl::ConsumePrefix(&rest, "file=")) {
      size_t at = rest.find(":n_alloc=");
      if (at == absl::string_view::npos || !parse_counts(rest.substr(at + 1), &c)) return bad("a file line without counts");
      file = std::string(rest.substr(0, at));
    } else if (absl::StartsWith(line, "region=")) {
      if (!split_site(line, &region, &c)) return bad("a region total without counts");
    } else if (absl::ConsumePrefix(&rest, "    line=")) {
      size_t colon = rest.find(':');
      int64_t number;
      if (file.empty() || colon == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, colon), &number) ||
          !split_site(rest.substr(colon + 1), &region, &c)) {
        return bad("a site line that does not parse (or comes before its file=)");
      }
      b.add(file, file, number, region, c);
    } else if (absl::ConsumePrefix(&rest, "    pc=")) {
      size_t at = rest.find(":region=");
      if (at == absl::string_view::npos || !split_site(rest.substr(at + 1), &region, &c)) {
        return bad("a return-address line that does not parse");
      }
      b.add(std::string(rest.substr(0, at)), "", 0, region, c);
    } else if (absl::ConsumePrefix(&rest, "other sites (past ")) {
      size_t at = rest.find("):");
      if (at == absl::string_view::npos || !split_site(rest.substr(at + 2), &region, &c)) {
        return bad("an other-sites line that does not parse");
      }
      b.add("(other sites)", "", 0, region, c);
    } else {
      return bad("not a line of a profile summary");
    }
  }
  if (!any) return absl::InvalidArgumentError("no \"ALLOCATION USAGE SUMMARY:\" line: not a profile summary");
  return b.serialized();
}

}  // namespace memd::memdctl
