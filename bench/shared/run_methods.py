#!/usr/bin/env python3
"""Runs bench_methods (the pool and last methods against their peers, side by
side in rounds, ratios paired per round) and writes
bench/results/methods-<date>.md with the command, machine and tree.

  python3 bench/shared/run_methods.py --build build/release [--rounds 5] [--ops 2000000]
"""
import argparse
import datetime
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "bench"))
from harness import machine, result_files  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ops", type=int, default=2_000_000)
    ap.add_argument("--no-write", action="store_true", help="print only")
    a = ap.parse_args()
    binary = os.path.join(a.build, "bench", "shared", "bench_methods")
    if not os.path.exists(binary):
        sys.exit(f"run_methods: {binary} is missing (Boost not found at configure time?)")
    load_before = os.getloadavg()
    run = subprocess.run([binary, "--rounds", str(a.rounds), "--ops", str(a.ops)], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"run_methods: bench_methods failed ({run.returncode}): {run.stderr}")
    load_after = os.getloadavg()
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    command = " ".join(["python3", "bench/shared/run_methods.py", "--build", a.build, "--rounds", str(a.rounds),
                        "--ops", str(a.ops)])
    md = "\n".join(machine.report_header("memd region methods (pool, last, debug, profile) against their peers", now, command,
                                         ["libboost1.74-dev", "libmimalloc2.0", "libc6"], TOP, load_before,
                                         load_after) + [
        "Every round runs every allocator once per workload, one process, one thread. Ratios are taken per "
        "round, then the median. **ring64**: 4096 live 64-byte objects, then a random slot's object freed and a "
        "new one allocated and written, `--ops` times (ns per pair). **arena**: objects of 8-256 bytes allocated "
        "and written until 1 MiB is asked for, then all released at once (ns per object, its release included). "
        "memd-* and boost-* live in POSIX shared memory (tmpfs); glibc, mimalloc and pmr-* are private to the "
        "process, so those rows are not like for like: they share nothing. Source: bench/shared/bench_methods.cc.",
        "",
        run.stdout.rstrip(),
        "",
    ])
    print(md)
    if not a.no_write:
        stem = result_files.unused_stem(os.path.join(TOP, "bench", "results"), "methods", now[:10])
        with open(stem + ".md", "w") as f:
            f.write(md)
        print(f"run_methods: wrote {stem}.md", file=sys.stderr)


if __name__ == "__main__":
    main()
