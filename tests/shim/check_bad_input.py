#!/usr/bin/env python3
"""Runs bad_input_program under the memd shim and checks its error reports.

  check_bad_input.py --lib SHIM --program PROG report   every case reported once, program survives
  check_bad_input.py --lib SHIM --program PROG quiet    MEMD_QUIET=1: survives, reports nothing
  check_bad_input.py --lib SHIM --program PROG abort    MEMD_ABORT_ON_ERROR=1: a double free raises SIGABRT

The program writes "case <name> <call> <address>" to stderr before each bad
call; the shim's report for it must follow before the next marker.
"""
import argparse
import os
import resource
import signal
import subprocess
import sys


def run(args, extra_env, argv):
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", "MEMD_QUIET", "MEMD_ABORT_ON_ERROR")}
    env.update(extra_env, LD_PRELOAD=os.path.abspath(args.lib))
    # The abort case must not leave a core file behind.
    proc = subprocess.run([args.program] + argv, env=env, capture_output=True, timeout=50,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)))
    return proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")


def check_reports(stderr):
    """Returns a list of problems: each case needs one matching memd: line."""
    problems = []
    cases = []  # [name, call, address, [memd lines]]
    for line in stderr.splitlines():
        if line.startswith("case "):
            _, name, call, addr = line.split()
            cases.append([name, call, addr, []])
        elif line.startswith("memd:"):
            if not cases:
                problems.append(f"report before any case: {line}")
            else:
                cases[-1][3].append(line)
        elif "ld.so" in line:
            problems.append(line)
    if not cases or cases[-1][0] != "end":
        problems.append("the program did not reach the end of the cases")
    for name, call, addr, reports in cases:
        if name == "end":
            if reports:
                problems.append(f"reports after the last case (the heap check): {reports}")
            continue
        if len(reports) != 1:
            problems.append(f"{name}: expected one memd: line, got {len(reports)}: {reports}")
            continue
        line = reports[0]
        # memd: <call>(): <what> 0x<address> (caller 0x...)
        if not line.startswith(f"memd: {call}():"):
            problems.append(f"{name}: report does not name {call}(): {line}")
        if f" {addr} " not in line:
            problems.append(f"{name}: report does not name the address {addr}: {line}")
        if "(caller 0x" not in line:
            problems.append(f"{name}: report does not name the caller: {line}")
        wants_double = "double-free" in name or "freed" in name
        if wants_double and "double free" not in line:
            problems.append(f"{name}: not reported as a double free: {line}")
        if not wants_double and "not allocated by memd" not in line:
            problems.append(f"{name}: not reported as an invalid pointer: {line}")
    return problems, len(cases) - 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--program", required=True)
    ap.add_argument("mode", choices=["report", "quiet", "abort"])
    args = ap.parse_args()

    problems = []
    if args.mode == "report":
        status, out, err = run(args, {}, [])
        if status != 0:
            problems.append(f"exit status {status}, expected 0")
        found, n = check_reports(err)
        problems += found
        summary = f"{n} cases"
    elif args.mode == "quiet":
        status, out, err = run(args, {"MEMD_QUIET": "1"}, [])
        if status != 0:
            problems.append(f"exit status {status}, expected 0")
        reports = [l for l in err.splitlines() if l.startswith("memd:")]
        if reports:
            problems.append(f"MEMD_QUIET=1 still reported: {reports}")
        summary = "quiet"
    else:
        status, out, err = run(args, {"MEMD_ABORT_ON_ERROR": "1"}, ["double-free"])
        if status != -signal.SIGABRT:
            problems.append(f"exit status {status}, expected death by SIGABRT ({-signal.SIGABRT})")
        if not any(l.startswith("memd: free(): double free") for l in err.splitlines()):
            problems.append("no double free report before the abort")
        summary = "aborted"

    if problems:
        for p in problems:
            print("FAIL:", p)
        print("--- stdout ---\n" + out[-2000:] + "\n--- stderr ---\n" + err[-4000:])
        return 1
    print(out[-500:], end="")
    print(f"ok ({summary})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
