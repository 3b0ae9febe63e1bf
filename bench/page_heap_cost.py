#!/usr/bin/env python3
"""What a change costs on the page-heap path, in instructions per pair.

Runs bench/telemetry/pair_loop under valgrind's callgrind with two builds of
the memd shim (a baseline built from an earlier commit, and this tree's),
on cases that go through the page heap (large blocks of 24 KiB objects,
huge objects of 64 KiB, allocated and freed in batches of 512) and on rings
of mixed sizes (8 B - 32 KiB, which reach the large path, and 8-512 B, the
segregated fast path only). Per case, the cost of one pair is the
difference between a long and a short run over their difference in pairs,
so start-up and exit cancel out. Instruction counts do not drift with a
shared machine's speed, so one run of each suffices.

    git worktree add /tmp/base <commit> && (cd /tmp/base && cmake --preset release &&
        cmake --build build/release --target memd-malloc)
    python3 bench/page_heap_cost.py --base /tmp/base/build/release/client/libmemd-malloc.so \\
        --base-name <commit> --build build/release

Writes bench/results/page-heap-cost-<date>.md (unless --no-write).
"""
import argparse
import datetime
import os
import subprocess
import sys
import tempfile

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(BENCH_DIR)
sys.path.insert(0, BENCH_DIR)
from harness import machine  # noqa: E402
from harness.result_files import unused_stem  # noqa: E402
from telemetry.instructions_per_pair import instructions  # noqa: E402

LOOP_SOURCE = os.path.join(BENCH_DIR, "telemetry", "pair_loop.c")
# (size or largest size, pair_loop mode, short run, long run)
CASES = [
    (24576, 1, 51200, 256000, "24 KiB objects, batches of 512 (large blocks)"),
    (65536, 1, 5120, 25600, "64 KiB objects, batches of 512 (huge runs)"),
    (32768, 2, 20000, 120000, "ring of 4096, sizes 8 B - 32 KiB"),
    (512, 2, 100000, 600000, "ring of 4096, sizes 8-512 B"),
]


def per_pair(loop, shim, size, mode, short, long):
    def count(pairs):
        return instructions(loop, shim, {}, pairs, size, mode)
    return (count(long) - count(short)) / (long - short)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="libmemd-malloc.so of the baseline")
    p.add_argument("--base-name", required=True, help="what the baseline is (its commit)")
    p.add_argument("--build", required=True, help="this tree's build directory")
    p.add_argument("--out", default=os.path.join(BENCH_DIR, "results"))
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    shim = os.path.abspath(os.path.join(args.build, "client", "libmemd-malloc.so"))
    with tempfile.TemporaryDirectory() as tmp:
        loop = os.path.join(tmp, "pair_loop")
        subprocess.run(["cc", "-O2", LOOP_SOURCE, "-o", loop], check=True)
        rows = []
        for size, mode, short, long, what in CASES:
            base = per_pair(loop, os.path.abspath(args.base), size, mode, short, long)
            this = per_pair(loop, shim, size, mode, short, long)
            rows.append((what, base, this))
    day = datetime.date.today().isoformat()
    m = machine.describe()
    lines = [f"# The page-heap path: instructions per malloc/free pair, {day}", "",
             f"Command: `python3 bench/page_heap_cost.py --base <shim of {args.base_name}> "
             f"--base-name {args.base_name} --build {args.build}`", "",
             f"Tree: {machine.git_revision(REPO_DIR)}; baseline: {args.base_name}. "
             f"Machine: {m['cpu_model']}, {m['nproc']} CPUs, {m['memory']}; {m['compiler']}.", "",
             "Instructions from valgrind (callgrind), loop included; one run each (counts do not drift).", "",
             f"| case | {args.base_name} | this tree | this / baseline |", "|---|---:|---:|---:|"]
    for what, base, this in rows:
        lines.append(f"| {what} | {base:.1f} | {this:.1f} | {this / base:.3f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        stem = unused_stem(args.out, "page-heap-cost", day)
        with open(stem + ".md", "w") as f:
            f.write(text)
        print(f"wrote {stem}.md")


if __name__ == "__main__":
    main()
