// memd(8): the daemon's settings from daemon/config.h's table.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "daemon/config.h"
#include "tools/manual/manual.h"
#include "tools/manual/roff.h"

namespace memd::manual {
namespace {

// Defaults that depend on who runs memd and where: the page says the rule,
// not what the machine that built it had.
std::string default_of(const daemon::SettingDoc& s) {
  if (s.name == "socket") return "see ENVIRONMENT";
  if (s.name == "data-dir") return "$MEMD_DATA_DIR, else ./run/data";
  if (s.default_value.empty()) return "empty";
  return s.default_value;
}

}  // namespace

std::string memd_man_page(std::string_view version) {
  std::string page = roff_title("MEMD", 8, std::string(version), "memd");
  absl::StrAppend(&page, R"(.SH NAME
memd \- shared and persistent memory regions served to client processes
.SH SYNOPSIS
.B memd
.RB [ \-\-config
.IR FILE ]
[\fB\-\-\fIKEY\fR \fIVALUE\fR]...
.RB [ \-\-print\-config ]
.RB [ \-\-version ]
.RB [ \-\-help ]
.SH DESCRIPTION
.B memd
manages named regions of POSIX shared memory, mapped files and PMDK pmem
mappings, with a page heap inside each. Client processes link libmemd (or
preload libmemd\-malloc.so), lease page blocks from memd over gRPC on a Unix
socket, and allocate from them locally; any process attached to a region
may free any of its objects. File regions persist across restarts and
crashes.
.PP
memd runs with embedded defaults. A config file holds
.B key = value
lines (\fB#\fR starts a comment); flags override the file.
.SH OPTIONS
.TP
.BI \-\-config " FILE"
Read settings from
.IR FILE
first, wherever the flag appears.
.TP
.B \-\-print\-config
Print every setting as the file and flags leave it, and exit.
.TP
.B \-\-version
Print the version and the protocol version, and exit.
.TP
.BR \-\-help ", " \-h
Print the settings with their defaults, and exit.
.SH SETTINGS
Each is a key of the config file and a flag
.BI \-\- key " value"
(or
.BI \-\- key = value\fR).
)");
  for (const daemon::SettingDoc& s : daemon::setting_docs()) {
    absl::StrAppend(&page, ".TP\n.BI \\-\\-", roff_text(s.name), " \" VALUE\"\n", roff_text(s.help),
                    ".\nDefault: ", roff_text(default_of(s)), ".\n");
  }
  absl::StrAppend(&page, R"(.SH SIGNALS
.TP
.BR SIGTERM ", " SIGINT
Shut down cleanly: health turns NOT_SERVING, no new connection is taken,
calls in progress get drain\-timeout seconds, sessions end (clients keep
their leases for the next memd), and with checkpoint\-on\-exit file regions
are made durable.
.TP
.B SIGHUP
Logged and otherwise ignored: memd reads its settings at start only.
.SH SYSTEMD
With
.B $NOTIFY_SOCKET
set (Type=notify), memd sends READY=1 once its socket accepts clients and
STOPPING=1 when shutdown begins. Started by socket activation (LISTEN_FDS=1,
memd.socket), it serves the socket systemd passed, which must be bound to
the
.B socket
setting's path, and leaves it in place when it stops, so that clients
connecting during a restart wait instead of failing.
.SH ENVIRONMENT
)",
                  roff_text(absl::StrReplaceAll(daemon::kEnvironmentHelp, {{"\n", " "}})), R"(
.SH FILES
.TP
.I /etc/memd/memd.conf
Settings of the system service (memd.service passes \fB\-\-config\fR).
.TP
.I /run/memd/memd.sock
The system service's socket.
.TP
.I /var/lib/memd
The system service's data\-dir: region files, the region catalog and the
lease journal.
.TP
.I /dev/shm/memd.NAMESPACE.NAME
Shared memory regions.
.SH SEE ALSO
.BR memdctl (1),
.BR systemd.socket (5),
.BR shm_overview (7)
)");
  return page;
}

}  // namespace memd::manual
