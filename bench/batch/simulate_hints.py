#!/usr/bin/env python3
"""Counts the cache misses of bench_hints' walks in a cache simulator
(callgrind --cache-sim, the walk functions alone: --toggle-collect=*walk_*),
for every row of run_hints.py, once each (the simulation is deterministic
up to addresses). This machine's perf has no hardware cache or TLB events.
The simulated last level is 8 MiB (16-way), a common L3, not the host's.
Writes bench/results/hints-cachesim-<date>.md with the command and tree.

  python3 bench/batch/simulate_hints.py --build build/release
"""
import datetime
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "bench"))
from harness import allocators, launch, machine, side_by_side  # noqa: E402
from run_hints import memd_rows  # noqa: E402

CASE = (200000, 400000, 2)  # nodes, churn operations, walks
LL = "8388608,16,64"


def misses(out_file):
    """{event: count} from a callgrind output file's summary."""
    events, summary = [], []
    with open(out_file) as f:
        for line in f:
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("summary:"):
                summary = [int(x) for x in line.split()[1:]]
    return dict(zip(events, summary))


def main():
    a, binary, launcher = side_by_side.parse_args(__doc__, "simulate_hints", "bench/batch/bench_hints")
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        sys.exit("simulate_hints: valgrind is missing (apt-get install valgrind)")
    rows, skipped = side_by_side.peer_rows(a.build)
    rows.update(memd_rows())
    tmp = tempfile.mkdtemp(prefix="memd-cachesim-")
    table = []
    load_before = os.getloadavg()
    for name, (mode, preload) in rows.items():
        out_file = os.path.join(tmp, "callgrind.out")
        argv = [valgrind, "--tool=callgrind", "--cache-sim=yes", f"--LL={LL}", "--toggle-collect=*walk_*",
                f"--callgrind-out-file={out_file}", binary, mode] + [str(x) for x in CASE]
        run = launch.run(launcher, argv, preload=preload, timeout=1200)
        if not run.ok:
            sys.exit(f"simulate_hints: {name}: {run.error}\n{run.stderr_tail}")
        visited = float(run.values["nodes"]) * CASE[2]
        m = misses(out_file)
        table.append((name, m["D1mr"] / visited, m["DLmr"] / visited, float(run.values["near_fraction"])))
    shutil.rmtree(tmp, ignore_errors=True)
    load_after = os.getloadavg()
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    command = " ".join(["python3", "bench/batch/simulate_hints.py", "--build", a.build])
    lines = machine.report_header("Simulated cache misses of the hints benchmark's walks", now, command,
                                  allocators.PEER_PACKAGES, TOP, load_before, load_after)
    lines += [
        f"bench_hints with {CASE[0]} nodes, {CASE[1]} churn operations, {CASE[2]} walks (run_hints.py's large case), "
        "each row once under `valgrind --tool=callgrind --cache-sim=yes --LL=" + LL + " --toggle-collect=*walk_*`: "
        "data reads that miss the simulated 32 KiB L1 and the 8 MiB last level, per node walked, in the walk "
        "functions only. The simulator models neither hardware prefetching nor the TLB. *near*: of the nodes "
        "made after another, the fraction placed within a page of it. Source: bench/batch/bench_hints.cc.",
        "",
    ]
    lines += side_by_side.skipped_lines(skipped)
    lines += ["| row | L1 read misses/node | LL read misses/node | near |", "|---|---:|---:|---:|"]
    lines += [f"| {n} | {d1:.3f} | {ll:.3f} | {near:.2f} |" for n, d1, ll, near in table]
    side_by_side.print_and_write("\n".join(lines), os.path.join(TOP, "bench", "results"), "hints-cachesim", now[:10],
                                 "simulate_hints", write=not a.no_write)


if __name__ == "__main__":
    main()
