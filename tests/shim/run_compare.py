#!/usr/bin/env python3
"""Runs a command without and with LD_PRELOAD=<the memd shim> and compares.

The test passes when both runs exit 0 with byte-identical stdout and the
shimmed run wrote no `memd:` line (a heap error report) and no loader error
(a shim that failed to preload would otherwise pass silently) on stderr.

  run_compare.py --lib libmemd-malloc.so [--env K=V]... [--timeout S] -- cmd args...
  run_compare.py --lib ... --shim-only -- cmd args...   (no baseline run)

`{tmp}` in an argument becomes a fresh scratch directory for each run, so
the two runs never see each other's files.
"""
import argparse
import difflib
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile


def no_core_dumps():
    # A crash under the shim must not leave core files in the build tree.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run(cmd, env, timeout):
    """Returns (exit status, stdout bytes, stderr text); status -N = signal N."""
    tmp = tempfile.mkdtemp(prefix="memd-shim-")
    try:
        argv = [a.replace("{tmp}", tmp) for a in cmd]
        # A session of its own, so a timeout kills every process of the
        # pipeline (a deadlocked fork child included), not only the shell.
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=tmp, start_new_session=True, preexec_fn=no_core_dumps)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            return None, out, err.decode(errors="replace")
        return proc.returncode, out, err.decode(errors="replace")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def describe(status):
    if status is None:
        return "timed out (deadlock?)"
    if status < 0:
        return f"killed by signal {signal.Signals(-status).name}"
    return f"exit {status}"


def shim_stderr_problems(err):
    bad = []
    for line in err.splitlines():
        if line.startswith("memd:"):
            bad.append(line)
        elif "ld.so" in line or "cannot be preloaded" in line:
            bad.append(line)
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--env", action="append", default=[], help="K=V for both runs")
    ap.add_argument("--timeout", type=float, default=50)
    ap.add_argument("--shim-only", action="store_true")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("no command")
    lib = os.path.abspath(args.lib)
    if not os.path.isfile(lib):
        print(f"FAIL: shim library {lib} does not exist", file=sys.stderr)
        return 1

    base_env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MEMD_QUIET")}
    for kv in args.env:
        k, _, v = kv.partition("=")
        base_env[k] = v
    shim_env = dict(base_env, LD_PRELOAD=lib)

    failures = []
    s_status, s_out, s_err = run(cmd, shim_env, args.timeout)
    if s_status != 0:
        failures.append(f"shimmed run: {describe(s_status)}")
    problems = shim_stderr_problems(s_err)
    if problems:
        failures.append("shimmed run reported on stderr:\n  " + "\n  ".join(problems[:20]))

    if not args.shim_only:
        b_status, b_out, b_err = run(cmd, base_env, args.timeout)
        if b_status != 0:
            failures.append(f"baseline run (no shim): {describe(b_status)}\n{b_err[-2000:]}")
        if b_status != s_status:
            failures.append(f"exit differs: baseline {describe(b_status)}, shimmed {describe(s_status)}")
        if b_out != s_out:
            diff = difflib.unified_diff(b_out.decode(errors="replace").splitlines(),
                                        s_out.decode(errors="replace").splitlines(),
                                        "baseline", "shimmed", lineterm="", n=1)
            lines = list(diff)
            failures.append(f"stdout differs ({len(b_out)} vs {len(s_out)} bytes):\n" +
                            "\n".join(lines[:40]))
        else:
            print(f"stdout identical: {len(s_out)} bytes")

    if failures:
        print("command:", " ".join(cmd), file=sys.stderr)
        for f in failures:
            print("FAIL:", f, file=sys.stderr)
        if args.shim_only:
            print("--- shimmed stdout (tail) ---\n" + s_out.decode(errors="replace")[-3000:], file=sys.stderr)
        print("--- shimmed stderr (tail) ---\n" + s_err[-3000:], file=sys.stderr)
        return 1
    if args.shim_only:
        sys.stdout.write(s_out.decode(errors="replace")[-2000:])
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
