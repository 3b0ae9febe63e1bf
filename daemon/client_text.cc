#include "daemon/client_text.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace memd::daemon {
namespace {

constexpr char32_t kReplacement = 0xFFFD;
constexpr size_t kQuotedChars = 64;

// Decodes the character at the start of `in` (RFC 3629: no overlong forms,
// no surrogates, nothing above U+10FFFF). Returns the bytes it took; an
// invalid byte takes 1 and decodes as U+FFFD.
size_t decode(std::string_view in, char32_t* out) {
  const auto b0 = static_cast<unsigned char>(in[0]);
  if (b0 < 0x80) {
    *out = b0;
    return 1;
  }
  size_t len = b0 >= 0xC2 && b0 <= 0xDF ? 2 : b0 >= 0xE0 && b0 <= 0xEF ? 3 : b0 >= 0xF0 && b0 <= 0xF4 ? 4 : 0;
  *out = kReplacement;
  if (len == 0 || in.size() < len) return 1;
  char32_t c = b0 & (0x7F >> len);
  for (size_t i = 1; i < len; ++i) {
    const auto b = static_cast<unsigned char>(in[i]);
    if ((b & 0xC0) != 0x80) return 1;
    c = c << 6 | (b & 0x3F);
  }
  const char32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < min[len] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 1;
  *out = c;
  return len;
}

size_t encode(char32_t c, char* out) {
  if (c < 0x80) {
    out[0] = static_cast<char>(c);
    return 1;
  }
  if (c < 0x800) {
    out[0] = static_cast<char>(0xC0 | c >> 6);
    out[1] = static_cast<char>(0x80 | (c & 0x3F));
    return 2;
  }
  if (c < 0x10000) {
    out[0] = static_cast<char>(0xE0 | c >> 12);
    out[1] = static_cast<char>(0x80 | (c >> 6 & 0x3F));
    out[2] = static_cast<char>(0x80 | (c & 0x3F));
    return 3;
  }
  out[0] = static_cast<char>(0xF0 | c >> 18);
  out[1] = static_cast<char>(0x80 | (c >> 12 & 0x3F));
  out[2] = static_cast<char>(0x80 | (c >> 6 & 0x3F));
  out[3] = static_cast<char>(0x80 | (c & 0x3F));
  return 4;
}

// Characters that reorder the text shown after them (Trojan Source,
// CVE-2021-42574), and the line and paragraph separators some viewers
// break lines at.
bool is_bidi_control_or_separator(char32_t c) {
  return c == 0x061C || c == 0x200E || c == 0x200F || c == 0x2028 || c == 0x2029 || (c >= 0x202A && c <= 0x202E) ||
         (c >= 0x2066 && c <= 0x2069);
}

// One character of the text as it is shown, itself or its escape, into
// `buf`; returns its length.
size_t shown(char32_t c, char (&buf)[16]) {
  switch (c) {
    case '\n': return std::snprintf(buf, sizeof buf, "\\n");
    case '\r': return std::snprintf(buf, sizeof buf, "\\r");
    case '\t': return std::snprintf(buf, sizeof buf, "\\t");
    default: break;
  }
  if (c < 0x20 || c == 0x7F) return std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned>(c));
  if ((c >= 0x80 && c < 0xA0) || is_bidi_control_or_separator(c)) {
    return std::snprintf(buf, sizeof buf, "\\u{%X}", static_cast<unsigned>(c));
  }
  return encode(c, buf);
}

// Appends shown characters of `text` while they fit in `max_bytes` and
// `max_chars`; returns the bytes of `text` consumed.
size_t append_shown(std::string_view text, size_t max_bytes, size_t max_chars, std::string* out) {
  size_t at = 0;
  char buf[16];
  for (size_t chars = 0; at < text.size() && chars < max_chars; ++chars) {
    char32_t c;
    size_t len = decode(text.substr(at), &c);
    size_t n = shown(c, buf);
    if (out->size() + n > max_bytes) break;
    out->append(buf, n);
    at += len;
  }
  return at;
}

}  // namespace

std::string client_text(std::string_view text, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes));
  append_shown(text, max_bytes, SIZE_MAX, &out);
  return out;
}

std::string quote_client_text(std::string_view text) {
  std::string out = "\"";
  size_t used = append_shown(text, SIZE_MAX, kQuotedChars, &out);
  out.push_back('"');
  if (used < text.size()) absl::StrAppend(&out, "\xE2\x80\xA6(", text.size(), " bytes)");  // "…"
  return out;
}

}  // namespace memd::daemon
