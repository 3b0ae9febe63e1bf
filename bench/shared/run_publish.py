#!/usr/bin/env python3
"""Runs bench_publish side by side: durable allocate + fill + publish of
64-512 B objects with memd (Region::reserve/publish on a pmem-discipline
file) against PMDK libpmemobj (pmemobj_alloc with a constructor, and a
transaction per operation), at equal durability, in two modes: cache flushes
(PMEM_IS_PMEM_FORCE=1: what persistent memory would pay; on this file system
not actually durable) and msync (durable on this disk). Every round runs
every heap in both modes; ratios are taken per round, then the median.
Writes bench/results/publish-<date>.md with the command, machine and tree.

  python3 bench/shared/run_publish.py --build build/release [--rounds 5] [--seconds 1] [--dir DIR]
"""
import argparse
import datetime
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "bench"))
from harness import machine, side_by_side  # noqa: E402

HEAPS = ["memd-publish", "pmemobj-atomic", "pmemobj-tx"]
MODES = {"cache flushes (PMEM_IS_PMEM_FORCE=1)": {"PMEM_IS_PMEM_FORCE": "1"},
         "msync": {"PMEM_IS_PMEM_FORCE": "0"}}
# The ring's length in each mode: short enough that most operations of a
# run retire an object as well as publish one (msync makes about 2,000 a
# second; a ring of 4,096 would never come round).
SLOTS = {"cache flushes (PMEM_IS_PMEM_FORCE=1)": 4096, "msync": 256}
PACKAGES = ["libpmemobj1", "libpmem1"]


def run(binary, heap, env, seconds, directory, slots):
    out = subprocess.run([binary, "--heap", heap, "--seconds", str(seconds), "--dir", directory,
                          "--slots", str(slots)],
                         env={**os.environ, **env}, capture_output=True, text=True, check=True).stdout.split()
    return int(out[1]) / float(out[2])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--dir", default=None, help="where the heap files go (default: the build directory)")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    binary = os.path.join(a.build, "bench", "shared", "bench_publish")
    directory = a.dir or a.build
    load_before = os.getloadavg()
    rate = {(mode, heap): [] for mode in MODES for heap in HEAPS}
    for r in range(a.rounds):
        for mode, env in MODES.items():
            for heap in HEAPS:
                v = run(binary, heap, env, a.seconds, directory, SLOTS[mode])
                rate[(mode, heap)].append(v)
                print(f"round {r + 1}/{a.rounds} {mode} {heap}: {v:,.0f} ops/s", file=sys.stderr)
    load_after = os.getloadavg()
    fs = subprocess.run(["stat", "-f", "-c", "%T", directory], capture_output=True, text=True).stdout.strip()
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    command = " ".join(["python3", "bench/shared/run_publish.py", "--build", a.build, "--rounds", str(a.rounds),
                        "--seconds", str(a.seconds)] + (["--dir", a.dir] if a.dir else []))
    lines = machine.report_header("memd failure-atomic publish against libpmemobj", now, command, PACKAGES, TOP,
                                  load_before, load_after)
    lines += [
        f"Heap files in `{directory}` (`stat -f` says {fs}). One process, one thread; each run "
        f"{a.seconds} s, operations counted. An operation: the next slot of a ring of links in the heap (4,096 "
        "with cache flushes, 256 with msync, so that most operations of a run come round to a full slot) "
        "retires the object it names and publishes a new one of 64-512 B, filled first. After a power cut a slot "
        "names the new object with its bytes, or the old one, or none: never half an object "
        "(bench/shared/bench_publish.cc). Both sides make the same libpmem call for the bytes they persist. Not "
        "alike: memd's retirement of the old object clears the link durably but frees without a flush (a cut there "
        "can leak the object, never corrupt); pmemobj_free and tx_free are durable. Ratio: memd's ops/s over the "
        "peer's, taken per round, median over the rounds.",
        "",
    ]
    for mode in MODES:
        lines += [f"### {mode}", "", "| heap | ops/s (median) | ± | memd × this |", "|---|---:|---:|---:|"]
        for heap in HEAPS:
            v = rate[(mode, heap)]
            spread = (max(v) - min(v)) / 2 / statistics.median(v) * 100
            ratio = side_by_side.paired_ratio(rate[(mode, "memd-publish")], v)
            lines.append(f"| {heap} | {statistics.median(v):,.0f} | {spread:.0f}% | {ratio:.2f}× |")
        lines.append("")
    side_by_side.print_and_write("\n".join(lines), os.path.join(TOP, "bench", "results"), "publish", now[:10],
                                 "run_publish", write=not a.no_write)


if __name__ == "__main__":
    main()
