#!/usr/bin/env python3
"""Runs bench_chains side by side: in every round, lists and trees built
interleaved with other allocations and then walked, under glibc, jemalloc,
mimalloc, tcmalloc and memd's shim, and memd's shim with call-chain pools
(MEMD_CHAIN_POOLS=1), with and without object-group merging. Ratios to
glibc, of pools to no pools and of merging to none are taken
per round, then the median. Writes bench/results/chains-<date>.md with the
command, machine and tree.

  python3 bench/batch/run_chains.py --build build/release [--rounds 5]
"""
import datetime
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "bench"))
from harness import allocators, machine, side_by_side  # noqa: E402

# (workload, nodes per list, lists, node bytes, walks)
CASES = [("lists", 100000, 8, 32, 10), ("lists", 20000, 4, 64, 50), ("sets", 200000, 1, 16, 10),
         ("hot", 300000, 1, 32, 10), ("sites", 100000, 8, 32, 10)]
POOLS = "memd malloc, MEMD_CHAIN_POOLS=1"
UNMERGED = "memd malloc, MEMD_CHAIN_POOLS=1 MEMD_CHAIN_POOL_MERGE=0"


def describe(case):
    kind, n, lists, size, walks = case
    if kind == "lists":
        return f"{lists} lists of {n} nodes of {size} B, {walks} walks"
    if kind == "sites":
        return f"one list of {n * lists} nodes of {size} B made by {lists} call sites in turn, {walks} walks"
    if kind == "sets":
        return f"two sets of {n} random keys, {walks} walks"
    return f"2 hot lists of {n} nodes of {size} B among 64 call sites, {walks} walks"


def main():
    a, binary, launcher = side_by_side.parse_args(__doc__, "run_chains", "bench/batch/bench_chains")
    rows, skipped = side_by_side.peer_rows(a.build)
    if "memd malloc" not in rows:
        sys.exit("run_chains: memd's shim is not built")
    rows[POOLS] = ("", rows["memd malloc"][1], {"MEMD_CHAIN_POOLS": "1"})
    rows[UNMERGED] = ("", rows["memd malloc"][1], {"MEMD_CHAIN_POOLS": "1", "MEMD_CHAIN_POOL_MERGE": "0"})
    cases = {c: list(c[1:]) for c in CASES}
    # The mode is the case's first field: rows carry "" and take it here.
    results = {}
    load_before = os.getloadavg()
    for case in CASES:
        case_rows = {name: (case[0],) + tuple(row[1:]) for name, row in rows.items()}
        results.update(side_by_side.run_rounds(launcher, binary, case_rows, {case: cases[case]}, a.rounds))
    load_after = os.getloadavg()
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    command = " ".join(["python3", "bench/batch/run_chains.py", "--build", a.build, "--rounds", str(a.rounds)])
    lines = machine.report_header("memd call-chain pools (DPA) on structures built interleaved, walked", now,
                                  command, allocators.PEER_PACKAGES, TOP, load_before, load_after)
    lines += [
        "One process, one thread, malloc and free only (bench_chains is not linked to memd; the preloaded "
        "allocator serves it). `lists`: L linked lists built round-robin, half of them through a malloc wrapper "
        "called from a function per list (the DPA paper's safe_malloc case), a short-lived object of 16-128 B from "
        "other call sites after every node; then every list walked. `sets`: a std::set<uint64_t> and a "
        "std::set<uint32_t> of random keys inserted interleaved with the short-lived objects, walked in key order. "
        "`hot`: 64 call sites allocate in turn, two of them (one through the wrapper) build the lists that are "
        "walked, the other 62 make objects that stay (half of the nodes' size, half 16-128 B; a third freed). "
        "`sites`: one list whose nodes 8 call sites make in turn, a short-lived object after every node (a "
        "structure several functions insert into: each site's chain gets a pool, and the paper's object-group "
        "merging, on by default, makes them one again; the MEMD_CHAIN_POOL_MERGE=0 row keeps them apart). "
        "*adjacent*: the share of walked links whose next node lies within 128 B after the current one. The pools "
        "row is memd's shim with MEMD_CHAIN_POOLS=1 and nothing else changed. Peak RSS from wait4. "
        f"{a.rounds} rounds, every row of a case in each; medians; ratios taken per round, then the median. "
        "Cases run one after another, each with all its rounds. Source: bench/batch/bench_chains.cc.",
        "",
    ]
    lines += side_by_side.skipped_lines(skipped)
    for case in CASES:
        lines += [f"### {describe(case)}", "",
                  "| row | walk ns/node | vs glibc | build ns/node | vs glibc | peak RSS MiB | vs glibc | adjacent |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        base = results[(case, "glibc malloc")]
        for name in rows:
            m = results[(case, name)]
            lines.append(
                f"| {name} | {statistics.median(m['walk_ns_per_node']):.2f} | "
                f"{side_by_side.paired_ratio(m['walk_ns_per_node'], base['walk_ns_per_node']):.2f}× | "
                f"{statistics.median(m['build_ns_per_node']):.1f} | "
                f"{side_by_side.paired_ratio(m['build_ns_per_node'], base['build_ns_per_node']):.2f}× | "
                f"{statistics.median(m['maxrss_kib']) / 1024:.1f} | "
                f"{side_by_side.paired_ratio(m['maxrss_kib'], base['maxrss_kib']):.2f}× | "
                f"{statistics.median(m['adjacent']):.3f} |")
        p, q = results[(case, "memd malloc")], results[(case, POOLS)]
        lines += ["", f"Pools against no pools (paired per round): walk "
                  f"{side_by_side.paired_ratio(p['walk_ns_per_node'], q['walk_ns_per_node']):.2f}× as fast, build "
                  f"{side_by_side.paired_ratio(p['build_ns_per_node'], q['build_ns_per_node']):.2f}× as fast, peak RSS "
                  f"{side_by_side.paired_ratio(q['maxrss_kib'], p['maxrss_kib']):.3f}×; merging against pools "
                  f"kept apart: walk "
                  f"{side_by_side.paired_ratio(results[(case, UNMERGED)]['walk_ns_per_node'], q['walk_ns_per_node']):.2f}× "
                  f"as fast, adjacent {statistics.median(q['adjacent']):.3f} against "
                  f"{statistics.median(results[(case, UNMERGED)]['adjacent']):.3f}.", ""]
    side_by_side.print_and_write("\n".join(lines), os.path.join(TOP, "bench", "results"), "chains", now[:10],
                                 "run_chains", write=not a.no_write)


if __name__ == "__main__":
    main()
