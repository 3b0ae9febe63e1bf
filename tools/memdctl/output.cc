#include "tools/memdctl/output.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "heap/units.h"

namespace memd::memdctl {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

std::string human_bytes(uint64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB"};
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  // Move up a unit when the value would print as 1024.0 or more.
  while (unit + 1 < std::size(kUnits) && std::round(value * 10) >= 1024 * 10) {
    value /= 1024;
    ++unit;
  }
  char text[48];
  std::snprintf(text, sizeof text, "%.1f %s", value, kUnits[unit]);
  return text;
}

std::string octal_mode(uint32_t mode) {
  char text[16];
  std::snprintf(text, sizeof text, "0%03o", mode);
  return text;
}

std::string human_duration(uint64_t milliseconds) {
  uint64_t seconds = milliseconds / 1000;
  const uint64_t days = seconds / 86400, hours = seconds / 3600 % 24, minutes = seconds / 60 % 60;
  seconds %= 60;
  std::string text;
  if (days > 0) absl::StrAppend(&text, days, "d ");
  if (days > 0 || hours > 0) absl::StrAppend(&text, hours, "h ");
  if (days > 0 || hours > 0 || minutes > 0) absl::StrAppend(&text, minutes, "m ");
  absl::StrAppend(&text, seconds, "s");
  return text;
}

std::string enum_label(const google::protobuf::EnumDescriptor& type, int number) {
  const google::protobuf::EnumValueDescriptor* value = type.FindValueByNumber(number);
  if (value == nullptr) return absl::StrCat(number);
  // memd's enum values carry their type's name as a prefix (DISCIPLINE_SHM).
  std::string name = value->name();
  if (size_t underscore = name.find('_'); underscore != std::string::npos) name.erase(0, underscore + 1);
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  return name;
}

absl::StatusOr<std::string> to_json(const Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) return absl::InternalError(status.ToString());
  return json;
}

namespace {

// One field's value as a person reads it; see describe_fields.
std::string field_text(const Message& message, const FieldDescriptor& field) {
  const Reflection& reflection = *message.GetReflection();
  if (field.is_repeated() || field.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    std::string text;
    google::protobuf::TextFormat::PrintFieldValueToString(message, &field, -1, &text);
    return text;
  }
  const std::string& name = field.name();
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t value = reflection.GetUInt64(message, &field);
      if (name.size() > 6 && name.compare(name.size() - 6, 6, "_bytes") == 0) {
        return absl::StrCat(value, " (", human_bytes(value), ")");
      }
      if (name.rfind("pages_", 0) == 0) return absl::StrCat(value, " (", human_bytes(value * heap::kPageSize), ")");
      if (name == "uptime_ms") return absl::StrCat(value, " (", human_duration(value), ")");
      return absl::StrCat(value);
    }
    case FieldDescriptor::CPPTYPE_UINT32: {
      uint32_t value = reflection.GetUInt32(message, &field);
      return name == "mode" ? octal_mode(value) : absl::StrCat(value);
    }
    case FieldDescriptor::CPPTYPE_INT32: return absl::StrCat(reflection.GetInt32(message, &field));
    case FieldDescriptor::CPPTYPE_INT64: return absl::StrCat(reflection.GetInt64(message, &field));
    case FieldDescriptor::CPPTYPE_DOUBLE: return absl::StrCat(reflection.GetDouble(message, &field));
    case FieldDescriptor::CPPTYPE_FLOAT: return absl::StrCat(reflection.GetFloat(message, &field));
    case FieldDescriptor::CPPTYPE_BOOL: return reflection.GetBool(message, &field) ? "true" : "false";
    case FieldDescriptor::CPPTYPE_ENUM:
      return enum_label(*field.enum_type(), reflection.GetEnumValue(message, &field));
    case FieldDescriptor::CPPTYPE_STRING: return reflection.GetString(message, &field);
    case FieldDescriptor::CPPTYPE_MESSAGE: break;  // handled above
  }
  return "";
}

}  // namespace

std::string describe_fields(const Message& message) {
  const google::protobuf::Descriptor& type = *message.GetDescriptor();
  std::string text;
  for (int i = 0; i < type.field_count(); ++i) {
    const FieldDescriptor& field = *type.field(i);
    absl::StrAppend(&text, field.name(), ": ", field_text(message, field), "\n");
  }
  return text;
}

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::render() const {
  std::vector<size_t> widths;
  for (const Column& c : columns_) widths.push_back(c.title.size());
  for (const auto& row : rows_) {
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  auto render_line = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t i = 0; i < cells.size(); ++i) {
      const bool last = i + 1 == cells.size();
      std::string padding(widths[i] - cells[i].size(), ' ');
      if (i > 0) line += "  ";
      if (columns_[i].align == Align::kRight) {
        line += padding + cells[i];
      } else {
        line += cells[i];
        if (!last) line += padding;
      }
    }
    return line + "\n";
  };
  std::vector<std::string> titles;
  for (const Column& c : columns_) titles.push_back(c.title);
  std::string text = render_line(titles);
  for (const auto& row : rows_) text += render_line(row);
  return text;
}

}  // namespace memd::memdctl
