// Reading a fuzzer's bytes as a sequence of small values: each read takes
// what is left and pads with zeros once the input runs out, so that every
// input, however short, is a valid program for the target.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace memd::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return pos_ >= size_; }
  size_t left() const { return pos_ < size_ ? size_ - pos_ : 0; }

  template <class T>
  T take() {
    T v{};
    size_t n = std::min(sizeof v, left());
    std::memcpy(&v, data_ + pos_, n);
    pos_ += n;
    return v;
  }
  // Up to `n` bytes (fewer at the end of the input).
  std::string bytes(size_t n) {
    n = std::min(n, left());
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }
  // A length-prefixed chunk: one byte of length (times `unit`), then that many bytes.
  std::string chunk(size_t unit = 1) { return bytes(size_t{take<uint8_t>()} * unit); }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// A fuzz target's own check failed: report it the way libFuzzer reports a
// crash (the input is saved), with what went wrong.
[[noreturn]] void fail(const std::string& what);

}  // namespace memd::fuzz
