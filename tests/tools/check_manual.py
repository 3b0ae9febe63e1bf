#!/usr/bin/env python3
"""Checks memd's generated documents against the programs they describe.

  check_manual.py --build DIR --memd PATH --memdctl PATH --test-client PATH CHECK

CHECK is one of:
  pages       memd.8 and memdctl.1 render with groff -ww and no warning; memd.8
              names every setting `memd --print-config` prints, with the
              default `memd --help` shows; memdctl.1 every command, alias and
              global option `memdctl --help` lists, and every exit status
  completion  bash, with memdctl.bash sourced, completes commands, options,
              each command's own options, file subcommands, files, and region
              names from a real memd (found through --socket)
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../support"))
from memd_daemon import MemdDaemon  # noqa: E402


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def run(argv, env=None):
    p = subprocess.run(argv, capture_output=True, text=True, env=env)
    return p.returncode, p.stdout, p.stderr


def document(args, name):
    path = os.path.join(args.build, "tools", "manual", name)
    check(os.path.isfile(path), f"{path} was not built (target memd_manual)")
    return path, open(path).read()


def plain(roff):
    """What a reader sees of the roff escapes the pages use."""
    return roff.replace("\\-", "-").replace("\\e", "\\").replace("\\&", "")


def check_renders(path):
    groff = shutil.which("groff")
    check(groff is not None, "groff is not installed (apt-get install groff-base)")
    status, _, err = run([groff, "-man", "-Tutf8", "-ww", "-z", path])
    check(status == 0 and err == "", f"groff -ww {os.path.basename(path)}: exit {status}: {err}")


def clean_env():
    # The page must not depend on who builds it: defaults as memd has them
    # with nothing set.
    env = {k: v for k, v in os.environ.items() if k not in ("MEMD_SOCKET", "MEMD_DATA_DIR", "XDG_RUNTIME_DIR")}
    return env


def check_pages(args):
    memd_path, memd_page = document(args, "memd.8")
    ctl_path, ctl_page = document(args, "memdctl.1")
    for path in (memd_path, ctl_path):
        check_renders(path)

    status, printed, _ = run([args.memd, "--print-config"], env=clean_env())
    check(status == 0, "memd --print-config failed")
    status, help_text, _ = run([args.memd, "--help"], env=clean_env())
    page = plain(memd_page)
    keys = [line.split(" = ")[0] for line in printed.splitlines()]
    check(len(keys) > 20, f"memd --print-config printed {len(keys)} settings")
    for key in keys:
        m = re.search(r'^\.BI --' + re.escape(key) + r' " VALUE"\n(.*?)\.\nDefault: (.*?)\.\n', page, re.M | re.S)
        check(m is not None, f"memd.8 has no entry for the setting {key}")
        shown = re.search(r"^  --" + re.escape(key) + r" .*\((.*)\)$", help_text, re.M)
        check(shown is not None, f"memd --help does not show {key}")
        if key not in ("socket", "data-dir"):  # the page states their rule instead
            default = shown.group(1) if shown.group(1) != "" else "empty"
            check(m.group(2) == default, f"memd.8: {key} defaults to {m.group(2)!r}, memd --help says {default!r}")
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "SETTINGS", "SIGNALS", "SYSTEMD", "ENVIRONMENT",
                    "FILES", "SEE ALSO"):
        check(f".SH {section}\n" in memd_page, f"memd.8 has no {section} section")
    print(f"memd.8: {len(keys)} settings with their defaults")

    status, usage, _ = run([args.memdctl, "--help"])
    check(status == 0, "memdctl --help failed")
    page = plain(ctl_page)
    commands = re.findall(r"^  ([a-z]+)(?: |$)", usage.split("\noptions:")[0], re.M)
    check(len(commands) >= 10, f"memdctl --help lists {len(commands)} commands")
    for c in commands:
        check(re.search(r'^\.(?:BI "|B )' + c + r'[ "\n]', page, re.M), f"memdctl.1 has no entry for {c}")
    aliases = re.findall(r"^  [a-z]+.*? \(([a-z]+)\)\s", usage, re.M)
    check(aliases, "memdctl --help shows no alias (regions has ls)")
    for alias in aliases:
        check(f"Also\n.BR {alias} ." in page, f"memdctl.1 does not give the alias {alias}")
    for option in re.findall(r"^  (?:-\w, )?(--[a-z-]+)", usage.split("\noptions:")[1], re.M):
        check(option in page, f"memdctl.1 does not describe {option}")
    codes = re.findall(r"(\d) [a-z]", usage.split("exit status:")[1])
    check(len(codes) >= 5, "memdctl --help lists no exit statuses")
    for code in codes:
        check(f".TP\n.B {code}\n" in page, f"memdctl.1 does not explain exit status {code}")
    print(f"memdctl.1: {len(commands)} commands, exit statuses {','.join(codes)}")


def complete(script, words, cwd, memdctl):
    """What bash offers for `words` (the last one is being typed)."""
    line = " ".join(words)
    program = f"""
source {script} || exit 3
COMP_WORDS=({' '.join("'" + w + "'" for w in [memdctl] + words)})
COMP_CWORD={len(words)}
COMP_LINE='{memdctl} {line}'
_memdctl
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    status, out, err = run(["bash", "--norc", "--noprofile", "-c", program + ""], env=dict(os.environ, PWD=cwd))
    check(status == 0, f"completing {words}: bash exit {status}: {err}")
    return sorted(l for l in out.splitlines() if l)


def check_completion(args):
    script, _ = document(args, "memdctl.bash")
    status, usage, _ = run([args.memdctl, "--help"])
    every = sorted(re.findall(r"^  ([a-z]+)(?: |$)", usage.split("\noptions:")[0], re.M) +
                   re.findall(r"^  [a-z]+.*? \(([a-z]+)\)\s", usage, re.M))
    with tempfile.TemporaryDirectory(prefix="memd-completion-") as tmp:
        os.chdir(tmp)
        open("trace-a.txt", "w").close()
        os.mkdir("traces")
        cases = [
            ([""], every),
            (["fi"], ["file"]),
            (["--ti"], ["--timeout"]),
            (["--json", "--timeout", "3", "st"], ["stat", "stats"]),
            (["file", ""], ["check", "copy", "info", "repair", "roots", "snapshot"]),
            (["file", "info", "tra"], ["trace-a.txt", "traces"]),
            (["replay", "tr"], ["trace-a.txt", "traces"]),
            (["replay", "t", "--r"], ["--rounds"]),
            (["profile", "r", "--p"], ["--pid"]),
            (["profile", "r", "-"], sorted(["--socket", "--json", "--timeout", "--help", "-h", "--pid", "--output",
                                            "-o"])),
            (["stats", "x"], []),
            (["pprof", "s", "-o", "tr"], ["trace-a.txt", "traces"]),
        ]
        for words, expected in cases:
            got = complete(script, words, tmp, args.memdctl)
            check(got == sorted(expected), f"completing memdctl {' '.join(words)!r}: {got}, expected {sorted(expected)}")

        # Region names come from the daemon the command line names.
        with MemdDaemon(args.memd, tmp, namespace=f"cm{os.getpid()}") as memd:
            sock = memd.socket
            for name in ("alpha", "alps", "beta"):
                status, _, err = run([args.test_client, sock, name, "open"])
                check(status == 0, f"test_client could not open {name}: {err}")
            check(complete(script, ["--socket", sock, "stat", "al"], tmp, args.memdctl) == ["alpha", "alps"],
                  "region names of the daemon were not offered for stat")
            check(complete(script, [f"--socket={sock}", "remove", ""], tmp, args.memdctl) == ["alpha", "alps", "beta"],
                  "region names were not offered with --socket=PATH")
            check(complete(script, ["--socket", sock, "drain", "0", "--region", "b"], tmp, args.memdctl) == ["beta"],
                  "region names were not offered for drain --region")
            # No daemon there: nothing offered, and nothing printed in the way.
            check(complete(script, ["--socket", os.path.join(tmp, "none.sock"), "stat", ""], tmp, args.memdctl) == [],
                  "something was offered from a socket where no memd runs")
        os.chdir("/")
    print(f"completion: {len(cases)} cases and region names from a live memd")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", required=True)
    p.add_argument("--memd", required=True)
    p.add_argument("--memdctl", required=True)
    p.add_argument("--test-client", required=True)
    p.add_argument("check", choices=["pages", "completion"])
    args = p.parse_args()
    for name in ("build", "memd", "memdctl", "test_client"):  # the completion check changes directory
        setattr(args, name, os.path.abspath(getattr(args, name)))
    {"pages": check_pages, "completion": check_completion}[args.check](args)
    print(f"ok: {args.check}")


if __name__ == "__main__":
    main()
