#!/usr/bin/env python3
"""Runs bench_open side by side: the time to create an empty persistent heap,
to open one holding --objects objects of 64-512 B (clean close before), for a
second process to attach to it, and to open it after its user crashed
(recovery), for memd file regions, Boost.Interprocess managed_mapped_file and
PMDK libpmemobj. Every round runs every heap through every phase, each phase
a fresh process; ratios are taken per round, then the median. Writes
bench/results/open-<date>.md with the command, machine and tree.

  python3 bench/shared/run_open.py --build build/release [--rounds 5] [--objects 1000000] [--bytes 1G] [--dir DIR]
"""
import argparse
import datetime
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "bench"))
from harness import machine, side_by_side  # noqa: E402

HEAPS = ["memd", "boost", "pmemobj"]
PHASES = ["create", "fill", "open", "attach", "checkpoint", "checkpoint-idle", "crash", "recover"]
# Boost has no owner (a second process's open is the same call as the
# first's), and pmemobj refuses a second open of a pool in use.
SKIP = {("boost", "attach"), ("pmemobj", "attach"), ("pmemobj", "checkpoint"), ("pmemobj", "checkpoint-idle")}
PACKAGES = ["libpmemobj1", "libpmem1", "libboost-dev"]
# libpmemobj flushes every allocation; on a file system without DAX that is
# an msync per pmemobj_alloc, which would make filling a million objects take
# an hour. Forced to cache flushes, as for persistent memory: it affects the
# fill and the crash's work, not what an open or a recovery reads.
ENV = {"pmemobj": {"PMEM_IS_PMEM_FORCE": "1"}}


def run(binary, heap, phase, path, objects, size):
    argv = [binary, "--heap", heap, "--phase", phase, "--path", path, "--objects", str(objects), "--bytes", str(size)]
    p = subprocess.run(argv, env={**os.environ, **ENV.get(heap, {})}, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr}")
    if phase == "crash":
        return None
    fields = p.stdout.split()
    return float(fields[2]), int(fields[3])


def parse_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--objects", type=int, default=1_000_000)
    ap.add_argument("--bytes", default="1G")
    ap.add_argument("--dir", default=None, help="where the heap files go (default: the build directory)")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    size = parse_bytes(a.bytes)
    binary = os.path.join(a.build, "bench", "shared", "bench_open")
    base = a.dir or a.build
    load_before = os.getloadavg()
    seconds = {(h, p): [] for h in HEAPS for p in PHASES}
    in_use = {h: [] for h in HEAPS}
    for r in range(a.rounds):
        for heap in HEAPS:
            work = tempfile.mkdtemp(prefix="bench-open-", dir=base)
            try:
                path = os.path.join(work, "heap")
                for phase in PHASES:
                    if (heap, phase) in SKIP:
                        continue
                    out = run(binary, heap, phase, os.path.join(work, "empty") if phase == "create" else path,
                              a.objects, size)
                    if out is None:
                        continue
                    seconds[(heap, phase)].append(out[0])
                    if phase == "recover":
                        in_use[heap].append(out[1])
                    print(f"round {r + 1}/{a.rounds} {heap} {phase}: {out[0] * 1000:.2f} ms", file=sys.stderr)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()
    fs = subprocess.run(["stat", "-f", "-c", "%T", base], capture_output=True, text=True).stdout.strip()
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    command = " ".join(["python3", "bench/shared/run_open.py", "--build", a.build, "--rounds", str(a.rounds),
                        "--objects", str(a.objects), "--bytes", a.bytes] + (["--dir", a.dir] if a.dir else []))
    lines = machine.report_header("Create, open, attach and recovery of persistent heaps", now, command, PACKAGES, TOP,
                                  load_before, load_after)
    lines += [
        f"Heap files in `{base}` (`stat -f` says {fs}), in the page cache (each phase reads what the one before "
        f"wrote). A heap of {size:,} bytes holding {a.objects:,} objects of 64-512 B, their offsets in a root array "
        "(bench/shared/bench_open.cc). Each phase is a fresh process, timed inside it:",
        "",
        "- **create**: an empty heap made and ready to allocate. Metall reports 44 ms for this (its paper's "
        "defaults; Metall is not a Debian package and is not run here).",
        "- **fill**: setup, timed for the record: the objects allocated and a clean close (memd and Boost msync "
        "the file; libpmemobj runs with `PMEM_IS_PMEM_FORCE=1`, cache flushes, as an msync per allocation on this "
        "file system would take an hour).",
        "- **open**: the filled heap opened after a clean close, and its root found. memd's owner open rebuilds "
        "the page heap from the descriptors every time (the same pass as a recovery).",
        "- **attach**: memd only: a second process attaches (Region::attach through the owner's socket: lease "
        "slot, thread heap) while the owner has the region open. Boost has no owner: a second process's open is "
        "its open above; libpmemobj refuses a second open of a pool in use.",
        "- **checkpoint**: the filled heap opened and checkpointed, one byte written into 1% of its objects, "
        "and the checkpoint that makes them durable timed (memd: `Region::checkpoint`, an msync of the region up "
        "to its last committed page; Boost: an msync of its mapping, `MS_SYNC`, as its `flush` is asynchronous). **checkpoint-idle**: the same with "
        "nothing written since. libpmemobj has no checkpoint: every allocation is durable when it returns.",
        "- **crash** (not timed): the heap opened, 1% of the objects freed and allocated again, `_exit` with no "
        "close.",
        "- **recover**: the heap the crash left opened, and its root found. memd rebuilds the page heap and "
        "repairs every block; libpmemobj replays its lanes; Boost has no recovery (its open is the same as after "
        "a clean close, and would not notice a segment manager left half-changed).",
        "",
        "Ratio: memd's time over the peer's, taken per round, median over the rounds (below 1: memd is faster).",
        "",
        "| phase | memd (ms) | boost (ms) | pmemobj (ms) | memd ÷ boost | memd ÷ pmemobj |",
        "|---|---:|---:|---:|---:|---:|",
    ]

    def cell(heap, phase):
        v = seconds[(heap, phase)]
        return f"{statistics.median(v) * 1000:.2f}" if v else "—"

    def ratio(phase, peer):
        m, p = seconds[("memd", phase)], seconds[(peer, phase)]
        return f"{side_by_side.paired_ratio(m, p):.2f}×" if m and p and len(m) == len(p) else "—"

    for phase in PHASES:
        if phase == "crash":
            continue
        lines.append(f"| {phase} | {cell('memd', phase)} | {cell('boost', phase)} | {cell('pmemobj', phase)} | "
                     f"{ratio(phase, 'boost')} | {ratio(phase, 'pmemobj')} |")
    lines.append("")
    gib = statistics.median(in_use["memd"]) / (1 << 30)
    per_gib = statistics.median(seconds[("memd", "recover")]) * 1000 / gib if gib > 0 else 0
    lines += [f"memd's recovery: {per_gib:.1f} ms per GiB of pages in use ({statistics.median(in_use['memd']):,} "
              "bytes of pages held the objects after the crash).", ""]
    side_by_side.print_and_write("\n".join(lines), os.path.join(TOP, "bench", "results"), "open", now[:10],
                                 "run_open", write=not a.no_write)


if __name__ == "__main__":
    main()
