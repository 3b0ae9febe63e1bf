// memd's and memdctl's manuals and memdctl's shell completion, written from
// the same tables their command lines are parsed with (daemon/config.h's
// settings, tools/memdctl/command_line.h's commands and flags): a setting or
// command added there appears here without anyone remembering to.
#pragma once

#include <string>
#include <string_view>

namespace memd::manual {

std::string memd_man_page(std::string_view version);      // memd(8), roff
std::string memdctl_man_page(std::string_view version);   // memdctl(1), roff
std::string memdctl_bash_completion();                    // for bash-completion's completions/ directory

}  // namespace memd::manual
