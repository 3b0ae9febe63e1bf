// Text into roff (man(7)) source: what the page says, never a request.
#pragma once

#include <string>
#include <string_view>

namespace memd::manual {

// Backslashes and hyphens escaped, and a line that would start with '.'
// or '\'' (a request) kept as text.
std::string roff_text(std::string_view text);

// The page's header line: .TH NAME SECTION "" "memd VERSION" TITLE.
std::string roff_title(const std::string& name, int section, const std::string& version,
                       const std::string& title);

}  // namespace memd::manual
