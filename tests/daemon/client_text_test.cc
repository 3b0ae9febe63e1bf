// Client text on its way to logs, labels and messages (daemon/client_text.h).
#include "daemon/client_text.h"

#include <gtest/gtest.h>

#include <string>

namespace memd::daemon {
namespace {

const std::string kEmoji = "\xF0\x9F\x98\x80";  // U+1F600, 4 bytes
const std::string kRlo = "\xE2\x80\xAE";         // U+202E RIGHT-TO-LEFT OVERRIDE

TEST(ClientText, CutsOnACharacterBoundary) {
  std::string text = std::string(199, 'a') + kEmoji;
  EXPECT_EQ(client_text(text, 200), std::string(199, 'a'));
  EXPECT_EQ(client_text(text, 203), text);
  EXPECT_EQ(client_text(std::string(3, 'a') + kEmoji + "b", 7), "aaa" + kEmoji);
}

TEST(ClientText, InvalidUtf8BecomesTheReplacementCharacter) {
  const std::string kReplacement = "\xEF\xBF\xBD";
  EXPECT_EQ(client_text("a\xF0\x9F" "b", 100), "a" + kReplacement + kReplacement + "b");
  EXPECT_EQ(client_text("\xC0\xAF", 100), kReplacement + kReplacement);        // overlong '/'
  EXPECT_EQ(client_text("\xED\xA0\x80", 100), kReplacement + kReplacement + kReplacement);  // a surrogate
  EXPECT_EQ(client_text("\xF4\x90\x80\x80", 100).find("\xF4"), std::string::npos);  // above U+10FFFF
  EXPECT_EQ(client_text("caf\xC3\xA9", 100), "caf\xC3\xA9");
}

TEST(ClientText, ControlsAndBidiOverridesAreEscaped) {
  std::string text = std::string("a\nb\0c\r\t\x7F", 8) + kRlo + "\xC2\x85" + "\xE2\x81\xA6";
  EXPECT_EQ(client_text(text, 100), "a\\nb\\x00c\\r\\t\\x7F\\u{202E}\\u{85}\\u{2066}");
  EXPECT_EQ(client_text("a\xE2\x80\xA8" "b", 100), "a\\u{2028}b");  // LINE SEPARATOR
  // Clean text is left as it is: escaping twice changes nothing.
  std::string once = client_text(text, 100);
  EXPECT_EQ(client_text(once, 100), once);
}

TEST(ClientText, NeverCutsAnEscapeInTwo) {
  std::string text = "ab" + kRlo;
  EXPECT_EQ(client_text(text, 9), "ab");  // "\u{202E}" is 8 bytes: 10 do not fit
  EXPECT_EQ(client_text(text, 10), "ab\\u{202E}");
}

TEST(ClientText, QuotesAreBounded) {
  EXPECT_EQ(quote_client_text("jobs"), "\"jobs\"");
  std::string long_name(10000, 'x');
  std::string q = quote_client_text(long_name);
  EXPECT_EQ(q, "\"" + std::string(64, 'x') + "\"\xE2\x80\xA6(10000 bytes)");
  EXPECT_EQ(quote_client_text("a\nb"), "\"a\\nb\"");
}

}  // namespace
}  // namespace memd::daemon
