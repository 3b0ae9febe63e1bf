#!/usr/bin/env python3
"""Runs a program under the shim with its address space limited (RLIMIT_AS,
as `ulimit -v`, a container or valgrind would), below the process heap's
default reservation of 64 GiB.

The shim must reserve less rather than fail every allocation: it says once
on stderr how much it reserved, and the program runs as usual (exit 0, no
other report). Without a limit it says nothing.
"""
import argparse
import os
import re
import resource
import subprocess
import sys

LIMIT = 3 << 30  # bytes of address space


def run(program, env, limit):
    def set_limit():
        if limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    r = subprocess.run([program], env=env, capture_output=True, text=True, timeout=60, preexec_fn=set_limit)
    return r, [l for l in r.stderr.splitlines() if l.startswith("memd:")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--program", required=True)
    args = ap.parse_args()
    env = dict(os.environ, LD_PRELOAD=args.lib)
    env.pop("MEMD_RESERVE_GB", None)
    env.pop("MEMD_QUIET", None)
    failures = []
    limited, lines = run(args.program, env, LIMIT)
    if limited.returncode != 0:
        failures.append(f"limited: exit {limited.returncode}")
    found = re.search(r"address space limited; the process heap reserves (\d+) MiB$", lines[0]) if lines else None
    if len(lines) != 1 or not found or not 256 <= int(found.group(1)) < LIMIT >> 20:
        failures.append(f"limited: expected one 'address space limited ... N MiB' report, N under the limit, "
                        f"got {lines}")
    free, lines = run(args.program, env, 0)
    if free.returncode != 0 or lines:
        failures.append(f"unlimited: exit {free.returncode}, reports {lines}")
    for f in failures:
        print("FAIL:", f)
    if failures:
        print(limited.stdout[-2000:], limited.stderr[-2000:])
        return 1
    print("limited address space: reserved less, said so once, ran as usual")
    return 0


if __name__ == "__main__":
    sys.exit(main())
