#!/usr/bin/env python3
"""Runs a program under the shim with out-of-range MEMD_* size boundaries.

The shim must say once on stderr that it ignores them, then run the program
with the defaults: exit 0 and no other report.
"""
import argparse
import os
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--program", required=True)
    args = ap.parse_args()
    env = dict(os.environ, LD_PRELOAD=args.lib, MEMD_LARGE_MAX="49152", MEMD_LARGE_BLOCK_PAGES="40")
    run = subprocess.run([args.program], env=env, capture_output=True, text=True, timeout=60)
    lines = [l for l in run.stderr.splitlines() if l.startswith("memd:")]
    failures = []
    if run.returncode != 0:
        failures.append(f"exit {run.returncode}")
    if len(lines) != 1 or "out of range" not in lines[0] or "using the defaults" not in lines[0]:
        failures.append(f"expected one 'out of range ... using the defaults' report, got {lines}")
    for f in failures:
        print("FAIL:", f)
    if failures:
        print(run.stdout[-2000:], run.stderr[-2000:])
        return 1
    print("invalid options: warned once, ran with the defaults")
    return 0


if __name__ == "__main__":
    sys.exit(main())
