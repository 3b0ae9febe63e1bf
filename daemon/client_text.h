// Text that came from a client (Hello.program, region names, symbol names)
// on its way to a log line, a Prometheus label or an error message. Such
// text may be cut anywhere, be invalid UTF-8, hold NUL, newlines or bidi
// overrides: written as it came, one session could forge log lines, make
// /metrics unparsable for the whole target, or make memdctl fail to decode
// a reply (protobuf strings must be valid UTF-8).
//
// Every function here returns valid UTF-8 without control characters or
// bidi controls, never longer than asked, and never cuts a character or an
// escape in two.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace memd::daemon {

// `text` made safe to show, in at most `max_bytes` bytes: invalid UTF-8
// bytes become U+FFFD; control characters (C0, DEL, C1), bidi controls
// (U+061C, U+200E/F, U+202A-U+202E, U+2066-U+2069) and the line and
// paragraph separators (U+2028/9) become escapes ("\n",
// "\x00", "\u{202E}"). Clean text comes out unchanged, so applying it twice
// (the log does it to whole lines) changes nothing more. Cut after the last
// whole character or escape that fits.
std::string client_text(std::string_view text, size_t max_bytes);

// For error messages: `text` made safe, in quotes, at most 64 characters of
// it; a longer one ends in "…(N bytes)" with its length as sent.
std::string quote_client_text(std::string_view text);

}  // namespace memd::daemon
