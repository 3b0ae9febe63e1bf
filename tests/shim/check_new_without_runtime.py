#!/usr/bin/env python3
"""operator new in a process with no C++ runtime to throw from.

The shim carries no exception support and throws the program's own
std::bad_alloc, found in the program's C++ runtime. A C program that calls
the shim's operator new (new_without_runtime.c) has none: a new that
succeeds must work, and one that fails must end the process with SIGABRT
and a message saying why, never return null or crash elsewhere.
"""
import argparse
import os
import signal
import subprocess
import sys

WHY = "memd: operator new failed, and the program's C++ runtime cannot be found to throw std::bad_alloc"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--program", required=True)
    args = ap.parse_args()
    failures = []

    # Without the shim the program finds no operator new at all: it is a C
    # program, so the runtime is really absent.
    plain = subprocess.run([args.program], capture_output=True, text=True, timeout=60)
    if plain.returncode != 2:
        failures.append(f"without the shim: exit {plain.returncode}, expected 2 (no operator new): {plain.stdout}")

    run = subprocess.run([args.program], env=dict(os.environ, LD_PRELOAD=args.lib), capture_output=True,
                         text=True, timeout=60)
    if "new(64) gave an object: 7" not in run.stdout:
        failures.append(f"the first new did not work: {run.stdout!r}")
    if "returned" in run.stdout:
        failures.append(f"the failing new returned: {run.stdout!r}")
    if run.returncode != -signal.SIGABRT:
        failures.append(f"exit {run.returncode}, expected SIGABRT")
    if WHY not in run.stderr:
        failures.append(f"no explanation on stderr: {run.stderr[-500:]!r}")

    for f in failures:
        print("FAIL:", f)
    if not failures:
        print("ok: a failed operator new without a C++ runtime aborts with its reason")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
