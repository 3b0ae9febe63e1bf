#include "daemon/heap_profile.h"

#include <zlib.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pprof/profile.pb.h"

namespace memd::daemon {
namespace {

namespace pprof = perftools::profiles;

// The order of Sample.value: the sample types, as pprof names heap profiles.
enum ValueIndex { kAllocObjects, kAllocSpace, kInuseObjects, kInuseSpace, kValueCount };

// The profile's tables: each string, function and location stored once and
// named by its index or id. Ids start at 1: the format reads 0 as "none".
class Tables {
 public:
  Tables(pprof::Profile* profile, const std::vector<std::string>* functions)
      : profile_(profile), function_names_(functions) {
    string_index("");
  }

  int64_t string_index(const std::string& s) {
    auto [it, inserted] = strings_.try_emplace(s, profile_->string_table_size());
    if (inserted) profile_->add_string_table(s);
    return it->second;
  }

  uint64_t function_id(uint32_t function) {
    auto [it, inserted] = functions_.try_emplace(function, profile_->function_size() + 1);
    if (inserted) {
      const std::string& name = (*function_names_)[function];
      pprof::Function* f = profile_->add_function();
      f->set_id(it->second);
      // Clients send names already demangled: both names are that one.
      f->set_name(string_index(name));
      f->set_system_name(f->name());
    }
    return it->second;
  }

  // The same address in two processes is two places in two programs; the
  // same address named differently (a library reloaded) is two as well.
  // REQUIRES: frame.function indexes the input's functions.
  uint64_t location_id(const ProfileFrame& frame) {
    auto key = std::make_tuple(frame.address_space, frame.address, frame.function);
    auto [it, inserted] = locations_.try_emplace(std::move(key), profile_->location_size() + 1);
    if (inserted) {
      pprof::Location* l = profile_->add_location();
      l->set_id(it->second);
      l->set_address(frame.address);
      // No line: pprof shows the bare address of a frame nobody could name.
      if (frame.function != 0) l->add_line()->set_function_id(function_id(frame.function));
    }
    return it->second;
  }

  void add_value_type(pprof::ValueType* type, const char* name, const char* unit) {
    type->set_type(string_index(name));
    type->set_unit(string_index(unit));
  }

 private:
  pprof::Profile* profile_;
  const std::vector<std::string>* function_names_;
  std::unordered_map<std::string, int64_t> strings_;
  std::unordered_map<uint32_t, uint64_t> functions_;  // input's index -> profile's id
  std::map<std::tuple<uint64_t, uint64_t, uint32_t>, uint64_t> locations_;
};

// How many allocations one sample of `bytes` stands for. An allocation of
// s bytes is sampled with probability 1 - exp(-s / period) (a sample every
// `period` bytes on average, exponentially spaced), so each sample counts
// as 1 / that probability, the same correction pprof applies to Go's heap
// profiles. A period of 0 or 1 samples every allocation.
double unsample_weight(uint64_t bytes, uint64_t period) {
  if (period <= 1 || bytes == 0) return 1;
  return 1 / -std::expm1(-static_cast<double>(bytes) / static_cast<double>(period));
}

// Below 2^63, so that the conversion is exact in range.
std::optional<int64_t> to_int64(double value) {
  if (!(value >= 0 && value < 0x1p63)) return std::nullopt;
  return std::llround(value);
}

// Samples with the same stack and size become one Sample: pprof would add
// them anyway, and the profile is smaller.
struct MergedSample {
  uint64_t count = 0;
  uint64_t live = 0;
};
using StackAndSize = std::pair<std::vector<uint64_t>, uint64_t>;

absl::Status add_samples(const ProfileInput& input, Tables& tables, pprof::Profile& profile) {
  std::map<StackAndSize, MergedSample> merged;
  uint64_t dropped = 0;
  for (const ProfileSample& s : input.samples) {
    for (const ProfileFrame& frame : s.stack) {
      if (frame.function >= input.functions.size()) {
        return absl::InternalError(absl::StrCat("function ", frame.function, " is not in the profile's table"));
      }
    }
    // Sizes come from clients: one that no int64 holds is dropped (and
    // counted in a comment), never a reason to refuse everyone's profile.
    if (s.requested_bytes > INT64_MAX) {
      ++dropped;
      continue;
    }
    StackAndSize key{{}, s.requested_bytes};
    key.first.reserve(s.stack.size());
    for (const ProfileFrame& frame : s.stack) key.first.push_back(tables.location_id(frame));
    MergedSample& m = merged[std::move(key)];
    ++m.count;
    if (s.live) ++m.live;
  }

  const int64_t bytes_key = tables.string_index("bytes");
  for (const auto& [key, m] : merged) {
    const auto& [stack, bytes] = key;
    const double weight = unsample_weight(bytes, input.sample_period_bytes);
    const double size = static_cast<double>(bytes);
    std::optional<int64_t> values[kValueCount] = {
        to_int64(m.count * weight), to_int64(m.count * weight * size),
        to_int64(m.live * weight), to_int64(m.live * weight * size)};
    if (!values[0] || !values[1] || !values[2] || !values[3]) {
      dropped += m.count;  // unsampled beyond int64: see above
      continue;
    }
    pprof::Sample* sample = profile.add_sample();
    for (uint64_t id : stack) sample->add_location_id(id);
    for (const std::optional<int64_t>& v : values) sample->add_value(*v);
    // pprof's -tags and tagfocus=bytes read the size from this label.
    pprof::Label* label = sample->add_label();
    label->set_key(bytes_key);
    label->set_num(static_cast<int64_t>(bytes));
    label->set_num_unit(bytes_key);
  }
  if (dropped != 0) {
    profile.add_comment(tables.string_index(absl::StrCat(dropped, " samples dropped: sizes beyond int64")));
  }
  return absl::OkStatus();
}

// gzip, not raw deflate: a profile travels as a .pb.gz file, as Go's runtime
// writes them.
absl::StatusOr<std::string> gzip(const std::string& data) {
  if (data.size() > UINT_MAX) return absl::ResourceExhaustedError("profile too large to compress in one call");
  z_stream z{};
  constexpr int kGzipWindowBits = MAX_WBITS + 16;  // +16: a gzip header and trailer
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, kGzipWindowBits, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return absl::InternalError("zlib: deflateInit2 failed");
  }
  // deflateBound, taken after init, covers the gzip wrapper: one call does.
  std::string out(deflateBound(&z, data.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int result = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (result != Z_STREAM_END) return absl::InternalError(absl::StrCat("zlib: deflate returned ", result));
  return out;
}

}  // namespace

absl::StatusOr<std::string> build_heap_profile(const ProfileInput& input) {
  if (input.sample_period_bytes > INT64_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample period of ", input.sample_period_bytes, " bytes is beyond the profile's int64 period"));
  }
  pprof::Profile profile;
  Tables tables(&profile, &input.functions);
  // In ValueIndex order.
  tables.add_value_type(profile.add_sample_type(), "alloc_objects", "count");
  tables.add_value_type(profile.add_sample_type(), "alloc_space", "bytes");
  tables.add_value_type(profile.add_sample_type(), "inuse_objects", "count");
  tables.add_value_type(profile.add_sample_type(), "inuse_space", "bytes");
  profile.set_default_sample_type(tables.string_index("inuse_space"));
  tables.add_value_type(profile.mutable_period_type(), "space", "bytes");
  profile.set_period(static_cast<int64_t>(input.sample_period_bytes == 0 ? 1 : input.sample_period_bytes));
  profile.set_time_nanos(input.time_nanos);
  if (!input.comment.empty()) profile.add_comment(tables.string_index(input.comment));

  if (absl::Status s = add_samples(input, tables, profile); !s.ok()) return s;
  std::string serialized;
  if (!profile.SerializeToString(&serialized)) return absl::InternalError("cannot serialize the profile");
  return gzip(serialized);
}

}  // namespace memd::daemon
