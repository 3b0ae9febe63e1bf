#!/usr/bin/env python3
"""Runs bench_batch side by side: in every round, for every case, memd's
batch calls (alloc_batch/free_batch on a memd::Heap), the same heap one call
at a time, and malloc/free under glibc, jemalloc, mimalloc, tcmalloc and
memd's shim. Ratios to glibc are taken per round, then the median. Writes
bench/results/batch-<date>.md with the command, machine and tree.

  python3 bench/batch/run_batch.py --build build/release [--rounds 5] [--seconds 0.5]
"""
import datetime
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "bench"))
from harness import allocators, machine, side_by_side  # noqa: E402

# (object size, objects per batch)
CASES = [(16, 64), (64, 64), (256, 64), (64, 1024), (1024, 64)]


def main():
    a, binary, launcher = side_by_side.parse_args(
        __doc__, "run_batch", "bench/batch/bench_batch", lambda ap: ap.add_argument("--seconds", type=float, default=0.5))
    rows, skipped = side_by_side.peer_rows(a.build)
    rows["memd::Heap single calls"] = ("heap-single", None)
    rows["memd::Heap alloc_batch/free_batch"] = ("heap-batch", None)
    rows["std::list, memd::Allocator"] = ("list-heap", None)
    rows["std::list, memd::NodeAllocator (batches)"] = ("list-node", None)
    load_before = os.getloadavg()
    results = side_by_side.run_rounds(launcher, binary, rows, {c: [c[0], c[1], a.seconds] for c in CASES}, a.rounds)
    ns = {key: measures["ns_per_object"] for key, measures in results.items()}
    load_after = os.getloadavg()
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    command = " ".join(["python3", "bench/batch/run_batch.py", "--build", a.build, "--rounds", str(a.rounds),
                        "--seconds", str(a.seconds)])
    lines = machine.report_header("memd batch calls against single calls and the peers' malloc", now, command,
                                  allocators.PEER_PACKAGES, TOP, load_before, load_after)
    lines += [
        "Each case: K objects of one size allocated, the first byte of each written, then all freed, repeated for "
        f"{a.seconds} s after a warm-up (one process, one thread). ns per object (its alloc and its free), median of "
        f"{a.rounds} rounds; every round runs every row of every case. The ratio is to glibc's malloc, taken per round, "
        "then the median. memd::Heap rows are a private heap through the C++ API (no shim); the malloc rows run "
        "the same binary with the allocator preloaded (memd: libmemd-malloc.so). The std::list rows build a list of K "
        "nodes of that size (links included) and clear it, on a memd::Heap, through memd::Allocator (one call per "
        "node) or memd::NodeAllocator (nodes from alloc_batch, given back with free_batch). "
        "Source: bench/batch/bench_batch.cc.",
        "",
    ]
    lines += side_by_side.skipped_lines(skipped)
    for case in CASES:
        lines += [f"### {case[0]} B objects, {case[1]} per batch", "", "| row | ns/object | vs glibc malloc |",
                  "|---|---:|---:|"]
        base = ns[(case, "glibc malloc")]
        for name in rows:
            v = ns[(case, name)]
            ratio = side_by_side.paired_ratio(v, base)
            lines.append(f"| {name} | {statistics.median(v):.1f} | {ratio:.2f}× |")
        single, batch = ns[(case, "memd::Heap single calls")], ns[(case, "memd::Heap alloc_batch/free_batch")]
        speedup = side_by_side.paired_ratio(single, batch)
        listed, nodes = ns[(case, "std::list, memd::Allocator")], ns[(case, "std::list, memd::NodeAllocator (batches)")]
        node_speedup = side_by_side.paired_ratio(listed, nodes)
        lines += ["", f"Batch over single calls on the same heap: {speedup:.2f}× the throughput (paired per round); "
                  f"a std::list through NodeAllocator over Allocator: {node_speedup:.2f}×.", ""]
    side_by_side.print_and_write("\n".join(lines), os.path.join(TOP, "bench", "results"), "batch", now[:10], "run_batch",
                                 write=not a.no_write)

if __name__ == "__main__":
    main()
