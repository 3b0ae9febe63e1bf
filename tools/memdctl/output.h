// How memdctl prints: aligned tables and "key: value" lines for people, JSON
// for scripts, and the units both need (sizes, modes, durations).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/message.h"

namespace memd::memdctl {

// "512 B", "1.5 KiB", "256.0 MiB", "3.0 GiB": one decimal above bytes.
std::string human_bytes(uint64_t bytes);

// Permission bits as chmod takes them: "0600".
std::string octal_mode(uint32_t mode);

// "3d 4h 5m 6s", leading zero units left out; "0s" for less than a second.
std::string human_duration(uint64_t milliseconds);

// An enum value without its type's prefix, lowercase: DISCIPLINE_SHM -> "shm".
// A number the descriptor does not know prints as the number.
std::string enum_label(const google::protobuf::EnumDescriptor& type, int number);

// The message as the proto3 JSON mapping prints it, with every field (zeros
// included) under its .proto name, on one line.
absl::StatusOr<std::string> to_json(const google::protobuf::Message& message);

// Every field of the message, in .proto order, one "name: value" line each.
// Sizes (fields named *_bytes, and pages_* in pages) add a human-readable
// size, `mode` prints in octal and `uptime_ms` adds a duration.
std::string describe_fields(const google::protobuf::Message& message);

// Columns padded to their widest cell, two spaces apart; numbers align right.
class Table {
 public:
  enum class Align { kLeft, kRight };
  struct Column {
    std::string title;
    Align align = Align::kLeft;
  };

  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}
  // One cell per column.
  void add_row(std::vector<std::string> cells);
  // The header and every row, each line ending in '\n', no trailing spaces.
  std::string render() const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace memd::memdctl
