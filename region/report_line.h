// A line of a report built in a fixed buffer and written to stderr with one
// write(2): no malloc, usable from inside malloc.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>

namespace memd::region {

// Appends text to a fixed buffer, truncating.
struct Line {
  char buf[512];
  size_t len = 0;
  void add(const char* s) {
    while (*s && len < sizeof buf - 1) buf[len++] = *s++;
  }
  void add_hex(const void* p) { add_hex_value(reinterpret_cast<uintptr_t>(p)); }
  void add_hex_value(uint64_t v) {
    char tmp[16];
    int n = 0;
    do {
      tmp[n++] = "0123456789abcdef"[v & 15];
      v >>= 4;
    } while (v);
    add("0x");
    while (n > 0 && len < sizeof buf - 1) buf[len++] = tmp[--n];
  }
  void add_decimal(uint64_t v) {
    char tmp[20];
    int n = 0;
    do {
      tmp[n++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v);
    while (n > 0 && len < sizeof buf - 1) buf[len++] = tmp[--n];
  }
  void add_signed(int64_t v) {
    if (v < 0) {
      add("-");
      add_decimal(static_cast<uint64_t>(0) - static_cast<uint64_t>(v));
    } else {
      add_decimal(static_cast<uint64_t>(v));
    }
  }
  void write_to(int fd) const {
    ssize_t ignored = write(fd, buf, len);
    (void)ignored;
  }
  void write_out() const { write_to(STDERR_FILENO); }
};

}  // namespace memd::region
