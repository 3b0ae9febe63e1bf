#!/usr/bin/env python3
"""Runs bench_hints side by side: in every round, a churned linked list
walked under glibc, jemalloc, mimalloc, tcmalloc and memd's shim (malloc),
and on a memd::Heap without and with allocation hints (alloc_near, a page).
Ratios to glibc are taken per round, then the median. Writes
bench/results/hints-<date>.md with the command, machine and tree.

  python3 bench/batch/run_hints.py --build build/release [--rounds 5]
"""
import datetime
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "bench"))
from harness import allocators, machine, side_by_side  # noqa: E402

# (nodes, churn operations, walks)
CASES = [(20000, 40000, 50), (200000, 400000, 5)]


def memd_rows():
    """The rows on memd's C++ API, without and with hints: {name: (mode, None)}."""
    return {"memd::Heap, no hints": ("heap", None), "memd::Heap, alloc_near (a page)": ("heap-near", None),
            "std::list over memd::Allocator": ("std-list", None), "memd::hinted_list": ("hinted-list", None),
            "std::set over memd::Allocator": ("std-set", None), "memd::hinted_set": ("hinted-set", None)}


def main():
    a, binary, launcher = side_by_side.parse_args(__doc__, "run_hints", "bench/batch/bench_hints")
    rows, skipped = side_by_side.peer_rows(a.build)
    rows.update(memd_rows())
    load_before = os.getloadavg()
    results = side_by_side.run_rounds(launcher, binary, rows, {c: list(c) for c in CASES}, a.rounds)
    load_after = os.getloadavg()
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    command = " ".join(["python3", "bench/batch/run_hints.py", "--build", a.build, "--rounds", str(a.rounds)])
    lines = machine.report_header("memd allocation hints on a churned linked list, walked", now, command,
                                  allocators.PEER_PACKAGES, TOP, load_before, load_after)
    lines += [
        "A singly linked ring of N nodes of 64 B is built interleaved with N other objects of 64 B; half the "
        "others are freed (holes all over the heap); then the ring is churned (a random node's successor "
        "unlinked and freed, a new node linked after a random node) and walked. One process, one thread; every "
        f"round runs every row of every case; {a.rounds} rounds, medians; ratios to glibc taken per round, then "
        "the median. The std::list rows run the same operations on std::list over memd::Allocator and on "
        "memd::hinted_list (client/hinted.h; its node is two links and 48 bytes). The std::set rows are a tree "
        "instead (node of 64 B): N random keys inserted among the other objects, then a random key erased and a new "
        "one inserted per churn operation, walked in key order; on std::set over memd::Allocator and on "
        "memd::hinted_set, which hints the new key's neighbour in key order. *near*: of the nodes made after "
        "another, the fraction placed within a page of it (sets: of inserted keys, within a page of their "
        "successor in key order). "
        "Source: bench/batch/bench_hints.cc.",
        "",
    ]
    lines += side_by_side.skipped_lines(skipped)
    for case in CASES:
        lines += [f"### {case[0]} nodes, {case[1]} churn operations, {case[2]} walks", "",
                  "| row | walk ns/node | vs glibc | churn ns/op | vs glibc | near |", "|---|---:|---:|---:|---:|---:|"]
        base = results[(case, "glibc malloc")]
        for name in rows:
            m = results[(case, name)]
            walk, churn = m["walk_ns_per_node"], m["churn_ns_per_op"]
            # A tree is another workload than glibc's ring: no ratio to it.
            tree = rows[name][0].endswith("-set")
            walk_ratio = "—" if tree else f"{side_by_side.paired_ratio(walk, base['walk_ns_per_node']):.2f}×"
            churn_ratio = "—" if tree else f"{side_by_side.paired_ratio(churn, base['churn_ns_per_op']):.2f}×"
            lines.append(f"| {name} | {statistics.median(walk):.1f} | {walk_ratio} | {statistics.median(churn):.0f} | "
                         f"{churn_ratio} | {statistics.median(m['near_fraction']):.2f} |")
        lines.append("")
        for what, (without, with_hints) in {"memd::Heap": ("memd::Heap, no hints", "memd::Heap, alloc_near (a page)"),
                                            "the lists": ("std::list over memd::Allocator", "memd::hinted_list"),
                                            "the sets": ("std::set over memd::Allocator", "memd::hinted_set")}.items():
            p, q = results[(case, without)], results[(case, with_hints)]
            lines.append(f"Hints against none, {what} (paired per round): walk "
                         f"{side_by_side.paired_ratio(p['walk_ns_per_node'], q['walk_ns_per_node']):.2f}× as fast, "
                         f"churn {side_by_side.paired_ratio(p['churn_ns_per_op'], q['churn_ns_per_op']):.2f}× as fast.")
        lines.append("")
    side_by_side.print_and_write("\n".join(lines), os.path.join(TOP, "bench", "results"), "hints", now[:10], "run_hints",
                                 write=not a.no_write)

if __name__ == "__main__":
    main()
