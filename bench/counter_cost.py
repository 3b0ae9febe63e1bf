#!/usr/bin/env python3
"""What the telemetry counters cost on the malloc fast path.

Runs bench/telemetry/pair_loop in its ring mode (a ring of 4096 objects of 8-512 B, one replaced
per step, its first byte written) under two builds of the memd shim: the
default one, which counts every allocation and free per size class, and one
configured with -DMEMD_COUNTERS=OFF (the release-nocounters preset), in
which counting is compiled out. Reports, per pair:

  - instructions, from valgrind (callgrind, as bench/telemetry/instructions_per_pair.py counts them): the
    difference between a long and a short run, so start-up cancels out;
  - time, wall and CPU (user + system): each round runs both builds (in
    alternating order) and the ratios are taken within the round; the report
    gives the median ratios.

    cmake --preset release-nocounters && cmake --build --preset release-nocounters --target memd-malloc
    python3 bench/counter_cost.py --build build/release --nocounters build/release-nocounters

Writes bench/results/counter-cost-<date>.md and .json (unless --no-write).
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import machine, result_files  # noqa: E402
from harness.stats import median  # noqa: E402
from telemetry.instructions_per_pair import instructions as valgrind_instructions  # noqa: E402

SHIM = os.path.join("client", "libmemd-malloc.so")
LOOP_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "telemetry", "pair_loop.c")
MAX_SIZE = 512
RING_MODE = 2  # pair_loop's third argument
# The timed runs get what the valgrind runs get (a heap of 2 GiB: valgrind
# limits address space), so both measure the same heap.
ENV = {"MEMD_QUIET": "1", "MEMD_RESERVE_GB": "2"}


def per_pair_instructions(loop, shim, short, long):
    """Instructions of one pair: the difference of a long and a short run."""
    def count(pairs):
        return valgrind_instructions(loop, shim, {}, pairs, MAX_SIZE, RING_MODE)
    return (count(long) - count(short)) / (long - short)


def seconds(loop, shim, pairs):
    """Wall time and CPU time (user + system) of one run. CPU time leaves out
    what a shared machine takes away (time stolen by other guests, waits for
    a CPU), which wall time on a busy 2-CPU virtual machine does not."""
    start = time.perf_counter()
    p = subprocess.Popen([loop, str(pairs), str(MAX_SIZE), str(RING_MODE)],
                         env={**os.environ, **ENV, "LD_PRELOAD": shim},
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    elapsed = time.perf_counter() - start
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"pair_loop failed ({p.returncode}): {err.decode(errors='replace')}")
    return elapsed, usage.ru_utime + usage.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build/release", help="the default build (counters on)")
    ap.add_argument("--nocounters", default="build/release-nocounters", help="the -DMEMD_COUNTERS=OFF build")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--pairs", type=int, default=20_000_000, help="pairs per timed run")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    shims = {"counters": os.path.abspath(os.path.join(args.build, SHIM)),
             "no counters": os.path.abspath(os.path.join(args.nocounters, SHIM))}
    for path in shims.values():
        if not os.path.exists(path):
            sys.exit(f"counter_cost: {path} not found (see the usage at the top of this file)")
    tmp = tempfile.TemporaryDirectory(prefix="memd-counter-cost-")
    loop = os.path.join(tmp.name, "pair_loop")
    subprocess.run(["cc", "-O2", "-o", loop, LOOP_SOURCE], check=True)

    ins = {name: per_pair_instructions(loop, shim, 200_000, 1_200_000) for name, shim in shims.items()}
    rounds = []
    for r in range(args.rounds):
        order = list(shims) if r % 2 == 0 else list(reversed(shims))
        got = {name: seconds(loop, shims[name], args.pairs) for name in order}
        t = {name: wall for name, (wall, _) in got.items()}
        cpu = {name: c for name, (_, c) in got.items()}
        rounds.append({**t, "ratio": t["counters"] / t["no counters"],
                       "cpu": cpu, "cpu_ratio": cpu["counters"] / cpu["no counters"]})
        print(f"round {r + 1}: counters {t['counters']:.3f} s, no counters {t['no counters']:.3f} s, "
              f"ratio {rounds[-1]['ratio']:.4f}, CPU-time ratio {rounds[-1]['cpu_ratio']:.4f}",
              file=sys.stderr, flush=True)

    doc = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.relpath(sys.argv[0], repo)] + sys.argv[1:]),
        "tree": machine.git_revision(repo),
        "machine": machine.describe(),
        "pairs_per_run": args.pairs,
        "instructions_per_pair": ins,
        "rounds": rounds,
        "median_time_ratio": median([r["ratio"] for r in rounds]),
        "median_cpu_time_ratio": median([r["cpu_ratio"] for r in rounds]),
        "problems": [],
    }
    return result_files.publish_report(doc, render, os.path.join(repo, "bench", "results"), "counter-cost",
                                       not args.no_write, "counter_cost")


def render(doc):
    ins = doc["instructions_per_pair"]
    m = doc["machine"]
    lines = [
        "# The telemetry counters' cost on the fast path",
        "",
        f"- date: {doc['date']}; tree: {doc['tree']}",
        f"- command: `{doc['command']}`",
        f"- machine: {m['cpu_model']}, {m['nproc']} CPUs, {m['memory']}; kernel {m['kernel']}; {m['compiler']}",
        "- workload: `bench/telemetry/pair_loop N 512 2` under the memd shim: 4096 live objects of 8-512 B, one replaced per step "
        "(free the oldest, malloc a new one, write its first byte)",
        "",
        "| | counters on | counting compiled out | on / out |",
        "|---|---:|---:|---:|",
        f"| instructions per pair (valgrind, whole loop) | {ins['counters']:.1f} | {ins['no counters']:.1f} | "
        f"{ins['counters'] / ins['no counters']:.4f} |",
        f"| time per pair, median of {len(doc['rounds'])} paired rounds | "
        f"{1e9 * median([r['counters'] for r in doc['rounds']]) / doc['pairs_per_run']:.2f} ns | "
        f"{1e9 * median([r['no counters'] for r in doc['rounds']]) / doc['pairs_per_run']:.2f} ns | "
        f"{doc['median_time_ratio']:.4f} |",
        f"| CPU time (user + system) per pair, median of {len(doc['rounds'])} paired rounds | "
        f"{1e9 * median([r['cpu']['counters'] for r in doc['rounds']]) / doc['pairs_per_run']:.2f} ns | "
        f"{1e9 * median([r['cpu']['no counters'] for r in doc['rounds']]) / doc['pairs_per_run']:.2f} ns | "
        f"{doc['median_cpu_time_ratio']:.4f} |",
        "",
        "Each ratio is the median of the per-round ratios (each round runs both builds, in alternating order); "
        "the per-pair times beside them are medians of their own and only for scale. CPU time leaves out what a "
        "shared machine takes away (time stolen by other guests), which wall time includes. Instructions include "
        "the loop's own (its random numbers and ring), the same in both builds.",
        "",
        "| round | counters on (s) | compiled out (s) | ratio | CPU time ratio |",
        "|---:|---:|---:|---:|---:|",
    ]
    for i, r in enumerate(doc["rounds"], 1):
        lines.append(f"| {i} | {r['counters']:.3f} | {r['no counters']:.3f} | {r['ratio']:.4f} | {r['cpu_ratio']:.4f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
