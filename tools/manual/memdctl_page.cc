// memdctl(1): its commands, flags and exit statuses from
// tools/memdctl/command_line.h's tables.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "tools/manual/manual.h"
#include "tools/manual/roff.h"
#include "tools/memdctl/command_line.h"

namespace memd::manual {
namespace {

std::string one_line(const char* text) { return absl::StrReplaceAll(text, {{"\n", " "}}); }

}  // namespace

std::string memdctl_man_page(std::string_view version) {
  using namespace memd::memdctl;
  std::string page = roff_title("MEMDCTL", 1, std::string(version), "memd");
  absl::StrAppend(&page, R"(.SH NAME
memdctl \- look at and manage memd, its regions and region files
.SH SYNOPSIS
.B memdctl
.RI [ OPTION ]...
.I COMMAND
.RI [ ARG ]...
.SH DESCRIPTION
.B memdctl
asks a running
.BR memd (8)
through its socket about its regions, clients and statistics, checks and
compacts regions, and takes heap profiles. Three commands work offline, with
no daemon: replay, pprof and file.
.SH COMMANDS
)");
  for (const CommandSpec& c : command_specs()) {
    if (*c.operands != '\0') {
      absl::StrAppend(&page, ".TP\n.BI \"", roff_text(c.name), " \" \"", roff_text(c.operands), "\"\n");
    } else {
      absl::StrAppend(&page, ".TP\n.B ", roff_text(c.name), "\n");
    }
    absl::StrAppend(&page, roff_text(one_line(c.summary)), ".");
    if (*c.alias != '\0') absl::StrAppend(&page, " Also\n.BR ", roff_text(c.alias), " .");
    absl::StrAppend(&page, "\n");
  }
  absl::StrAppend(&page, ".SH OPTIONS\n");
  for (const FlagSpec& f : flag_specs()) {
    if (!f.global) continue;
    absl::StrAppend(&page, ".TP\n");
    std::string flag = *f.alias != '\0' ? absl::StrCat(f.alias, ", ", f.name) : std::string(f.name);
    if (*f.value != '\0') {
      absl::StrAppend(&page, ".BI \"", roff_text(flag), "\" \" ", roff_text(f.value), "\"\n");
    } else {
      absl::StrAppend(&page, ".B \"", roff_text(flag), "\"\n");
    }
    absl::StrAppend(&page, roff_text(one_line(f.summary)), ".\n");
  }
  absl::StrAppend(&page, ".PP\nOptions of one command are shown with its operands above.\n.SH \"EXIT STATUS\"\n");
  for (const ExitStatusSpec& e : exit_status_specs()) {
    absl::StrAppend(&page, ".TP\n.B ", e.code, "\n", roff_text(e.meaning), ".\n");
  }
  absl::StrAppend(&page, R"(.SH ENVIRONMENT
.TP
.B MEMD_SOCKET
The daemon's socket when
.B \-\-socket
is not given.
.SH SEE ALSO
.BR memd (8)
)");
  return page;
}

}  // namespace memd::manual
