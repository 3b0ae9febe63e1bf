#include "tools/manual/roff.h"

#include "absl/strings/str_cat.h"

namespace memd::manual {

std::string roff_text(std::string_view text) {
  std::string out;
  bool line_start = true;
  for (char c : text) {
    if (line_start && (c == '.' || c == '\'')) out += "\\&";
    line_start = c == '\n';
    if (c == '\\') {
      out += "\\e";
    } else if (c == '-') {
      out += "\\-";  // a minus sign, as options are typed, not a hyphen
    } else {
      out += c;
    }
  }
  return out;
}

std::string roff_title(const std::string& name, int section, const std::string& version,
                       const std::string& title) {
  // No date: the page is the same for every build of one version.
  return absl::StrCat(".TH ", name, " ", section, " \"\" \"memd ", version, "\" \"", title, "\"\n");
}

}  // namespace memd::manual
