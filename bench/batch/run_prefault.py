#!/usr/bin/env python3
"""Runs bench_prefault side by side: in every round, for every case, fresh
memory put to use under glibc, jemalloc, mimalloc, tcmalloc and memd's shim,
and under memd's shim with MEMD_PREFAULT=1 (fresh blocks and runs populated
in one call), MEMD_THP=1 (transparent huge pages) and both. Ratios to memd's
defaults and to glibc are taken per round, then the median. Writes
bench/results/prefault-<date>.md with the command, machine and tree.

  python3 bench/batch/run_prefault.py --build build/release [--rounds 5]
"""
import datetime
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "bench"))
from harness import allocators, machine, side_by_side  # noqa: E402

# (workload, MiB of fresh memory)
CASES = [("arrays", 512), ("objects", 256), ("objects", 2)]
VARIANTS = {"memd MEMD_PREFAULT=1": {"MEMD_PREFAULT": "1"}, "memd MEMD_THP=1": {"MEMD_THP": "1"},
            "memd MEMD_PREFAULT=1 MEMD_THP=1": {"MEMD_PREFAULT": "1", "MEMD_THP": "1"}}


def thp_mode():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def main():
    a, binary, launcher = side_by_side.parse_args(__doc__, "run_prefault", "bench/batch/bench_prefault")
    rows, skipped = side_by_side.peer_rows(a.build)
    if "memd malloc" not in rows:
        sys.exit("run_prefault: memd's shim is not built")
    shim = rows["memd malloc"][1]
    for name, env in VARIANTS.items():
        rows[name] = ("malloc", shim, env)
    load_before = os.getloadavg()
    results = side_by_side.run_rounds(launcher, binary, rows, {c: list(c) for c in CASES}, a.rounds, warm=True)
    load_after = os.getloadavg()
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    command = " ".join(["python3", "bench/batch/run_prefault.py", "--build", a.build, "--rounds", str(a.rounds)])
    lines = machine.report_header("Fresh pages put to use: memd's prefault and huge-page options and the peers",
                                  now, command, allocators.PEER_PACKAGES, TOP, load_before, load_after)
    lines += [
        "One process per run, fresh memory only (nothing is freed before the end): `arrays` allocates 4 MiB "
        "arrays and writes each in full; `objects` allocates 64-byte objects and writes 16 bytes of each (2 MiB of them: a small program, where "
        "huge pages cost resident memory). "
        "ns per 4 KiB page of the workload (its own clock), minor page faults and peak RSS of the process (wait4). "
        f"Median of {a.rounds} rounds; every round runs every row of every case, each "
        "measured run right after an unmeasured one of the same row (on this virtual machine the first run to use "
        "huge pages after runs on small ones pays the host's first touch of that memory, several times the rest); ratios taken per round, then the median. memd rows run the shim (libmemd-malloc.so); the option rows differ from `memd malloc` by their "
        f"environment only. Transparent huge pages on this machine: `{thp_mode()}`. Source: "
        "bench/batch/bench_prefault.cc.",
        "",
    ]
    lines += side_by_side.skipped_lines(skipped)
    for case in CASES:
        lines += [f"### {case[0]}, {case[1]} MiB", "",
                  "| row | ns/page | vs memd defaults | vs glibc malloc | minor faults | peak RSS MiB |",
                  "|---|---:|---:|---:|---:|---:|", ]
        base = results[(case, "memd malloc")]["ns_per_page"]
        glibc = results[(case, "glibc malloc")]["ns_per_page"]
        for name in rows:
            m = results[(case, name)]
            v = m["ns_per_page"]
            lines.append(f"| {name} | {statistics.median(v):.0f} | {side_by_side.paired_ratio(v, base):.2f}× | "
                         f"{side_by_side.paired_ratio(v, glibc):.2f}× | {statistics.median(m['minflt']):.0f} | "
                         f"{statistics.median(m['maxrss_kib']) / 1024:.0f} |")
        lines.append("")
    side_by_side.print_and_write("\n".join(lines), os.path.join(TOP, "bench", "results"), "prefault", now[:10],
                                 "run_prefault", write=not a.no_write)


if __name__ == "__main__":
    main()
