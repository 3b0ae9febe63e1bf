#!/usr/bin/env python3
"""Runs every allocator workload under glibc, jemalloc, mimalloc, tcmalloc and
memd (plus memd with other settings, e.g. memd-immediate) side by side, plus
the malloc microbenchmark, and writes a Markdown + JSON report to
bench/results/.

Rounds are interleaved: for each workload, round 1 runs it under every
allocator, then round 2 does the same, and so on, with the allocator order
rotated each round. Machine noise (thermal state, page cache, a background
job) then lands on all allocators alike instead of on whichever ran last.

    python3 bench/run_all.py --build build/release            # what `make bench` runs
    python3 bench/run_all.py --build build/release --rounds 1 --only symbolic,micro
"""
import argparse
import datetime
import json
import os
import shlex
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import allocators as alloc_mod  # noqa: E402
from harness import launch, machine, micro, report, summary  # noqa: E402
from harness.result_files import rerender_report  # noqa: E402
from harness.workloads import MICRO, RunContext, select  # noqa: E402

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(BENCH_DIR)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build/release", help="CMake build directory (default: build/release)")
    p.add_argument("--rounds", type=int, default=3, help="runs per workload and allocator (median is reported)")
    p.add_argument("--only", default="", help="comma list of workloads (wl_ prefix optional); 'micro' for the "
                                              "microbenchmark")
    p.add_argument("--allocators", default=",".join(alloc_mod.DEFAULT),
                   help=f"comma list from: {','.join(alloc_mod.ALL)} (default: {','.join(alloc_mod.DEFAULT)})")
    p.add_argument("--threads", type=int, default=2, help="threads for the multi-threaded workloads")
    p.add_argument("--scale", type=float, default=1.0, help="work multiplier for every workload")
    p.add_argument("--micro-min-time", type=float, default=0.1, help="seconds per microbenchmark case")
    p.add_argument("--timeout", type=float, default=300, help="seconds before a single run is killed")
    p.add_argument("--out", default=os.path.join(BENCH_DIR, "results"), help="directory for the report files")
    p.add_argument("--no-write", action="store_true", help="print the report only, write no files")
    p.add_argument("--render", metavar="JSON", default="",
                   help="write the Markdown of a saved report again from its JSON (same data, current wording)")
    args = p.parse_args()
    args.only = [n.strip() for n in args.only.split(",") if n.strip()]
    args.allocators = [a.strip() for a in args.allocators.split(",") if a.strip()]
    unknown = [a for a in args.allocators if a not in alloc_mod.ALL]
    if unknown:
        p.error(f"unknown allocator(s) {unknown}; choose from {alloc_mod.ALL}")
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    return args


def log(message):
    print(message, file=sys.stderr, flush=True)


def run_workloads(args, workloads, allocators, ctx):
    """Returns the list of raw run records (dicts, JSON-ready)."""
    runs = []
    for wi, w in enumerate(workloads, 1):
        w.prepare(ctx)  # inputs, made once and shared by every allocator and round
        for rnd in range(args.rounds):
            shift = rnd % len(allocators)
            for a in allocators[shift:] + allocators[:shift]:
                r = w.measure(ctx, a)
                rec = summary.validate({
                    "workload": w.name, "allocator": a.name, "round": rnd + 1, "ok": r.ok, "error": r.error,
                    "wall_s": r.wall_s, "maxrss_kib": r.maxrss_kib, "minflt": r.minflt, "majflt": r.majflt,
                    "utime_s": r.utime_s, "stime_s": r.stime_s, "values": r.values, "stderr_tail": r.stderr_tail,
                }, w.required)
                runs.append(rec)
                status = (f"{rec['wall_s']:.2f} s, {rec['maxrss_kib'] / 1024:.0f} MiB" if rec["ok"]
                          else f"FAILED: {rec['error']}")
                log(f"[{wi}/{len(workloads)}] {w.name} round {rnd + 1}/{args.rounds} {a.name:14s} {status}")
                if not rec["ok"] and rec["stderr_tail"]:
                    log("    " + rec["stderr_tail"].strip().replace("\n", "\n    "))
    return runs


def run_micro(args, allocators, bin_dir, launcher):
    binary = os.path.join(bin_dir, MICRO)
    if not os.path.isfile(binary):
        return {"error": f"{binary} not built (is libbenchmark-dev installed?)"}
    by_allocator = {}
    for a in allocators:
        log(f"[micro] {MICRO} under {a.name}")
        table, error = micro.run(launcher, binary, a, args.micro_min_time, args.timeout)
        by_allocator[a.name] = {"error": error, "ns": {f"{b}/{s}": ns for (b, s), ns in sorted(table.items())}}
        if error:
            log(f"    FAILED: {error}")
    return {"min_time_s": args.micro_min_time, "by_allocator": by_allocator}


def build_document(args, workloads, allocators, skipped, runs, micro_doc):
    names = [a.name for a in allocators]
    real_packages = [p for w in workloads for p in w.packages]
    doc = {
        "command": "python3 " + " ".join(shlex.quote(a) for a in sys.argv),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": machine.describe(),
        "packages": machine.package_versions(alloc_mod.PEER_PACKAGES + real_packages),
        "memd_revision": machine.git_revision(REPO_DIR),
        "settings": {"rounds": args.rounds, "threads": args.threads, "scale": args.scale, "build": args.build,
                     "allocators": names, "skipped": skipped,
                     # What each variant sets for the workload, e.g. {"memd-immediate": {"MEMD_DISCARD": ...}}.
                     "allocator_env": {a.name: a.env for a in allocators if a.env},
                     "ignored_env": launch.inherited_settings()},
        "workloads": {}, "mass_free": {}, "checksum_problems": [], "problems": [], "micro": micro_doc, "runs": runs,
    }
    for w in workloads:
        mine = [r for r in runs if r["workload"] == w.name]
        cells = {a: summary.cell([r for r in mine if r["allocator"] == a]) for a in names}
        doc["workloads"][w.name] = {"summary": w.summary, "cells": cells}
        doc["checksum_problems"] += [f"{w.name}: {p}" for p in summary.checksum_problems(cells)]
        doc["problems"] += [f"{w.name} under {a} failed: {c['error']}" for a, c in cells.items() if c["failed"]]
        if w.name == "wl_mass_free":
            for a in names:
                m = summary.mass_free([r for r in mine if r["allocator"] == a])
                if m:
                    doc["mass_free"][a] = m
    doc["problems"] += ["CHECKSUM MISMATCH " + p for p in doc["checksum_problems"]]
    if micro_doc:
        doc["problems"] += [f"{MICRO} under {a} failed: {m['error']}"
                            for a, m in micro_doc.get("by_allocator", {}).items() if m["error"]]
    return doc


def write_files(doc, markdown, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    stem = "heap-" + doc["date"][:10]
    n = 1
    while os.path.exists(os.path.join(out_dir, stem + ".md")):  # never overwrite an earlier run
        n += 1
        stem = f"heap-{doc['date'][:10]}-{n}"
    md_path, json_path = os.path.join(out_dir, stem + ".md"), os.path.join(out_dir, stem + ".json")
    with open(md_path, "w") as f:
        f.write(markdown)
    with open(json_path, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")
    return md_path, json_path


def main():
    args = parse_args()
    if args.render:
        return rerender_report(args.render, report.render, not args.no_write, "run_all")
    bin_dir = os.path.join(os.path.abspath(args.build), "bench")
    launcher = os.path.join(bin_dir, "bench_launch")
    if not os.path.isfile(launcher):
        sys.exit(f"run_all: {launcher} not found — build first (make build)")

    allocators, skipped = alloc_mod.resolve(args.allocators, args.build)
    for name, why in skipped.items():
        log(f"run_all: skipping {name}: {why}")
    for name in launch.inherited_settings():
        log(f"run_all: ignoring {name} from the environment: memd runs with its defaults, variants with their own "
            "settings (add a variant in harness/allocators.py to measure another setting)")
    if not allocators:
        sys.exit("run_all: no allocator available to run")

    workloads = select(args.only)
    want_micro = not args.only or "micro" in args.only or MICRO in args.only
    if not workloads and not want_micro:
        sys.exit(f"run_all: --only matched nothing: {args.only}")
    missing = {w.name: w.unavailable(bin_dir) for w in workloads}
    missing = {name: why for name, why in missing.items() if why}
    built_missing = [why for name, why in missing.items() if name.startswith("wl_")]
    if built_missing:
        sys.exit(f"run_all: {'; '.join(built_missing)}")
    # Real programs are optional: one that is not installed is skipped and
    # listed in the report.
    for name, why in missing.items():
        log(f"run_all: skipping {name}: {why}")
        skipped[name] = why
    workloads = [w for w in workloads if w.name not in missing]

    with tempfile.TemporaryDirectory(prefix="memd-bench-inputs-") as workdir:
        ctx = RunContext(launcher, bin_dir, args.threads, args.scale, args.timeout, workdir)
        runs = run_workloads(args, workloads, allocators, ctx)
    micro_doc = run_micro(args, allocators, bin_dir, launcher) if want_micro else None
    doc = build_document(args, workloads, allocators, skipped, runs, micro_doc)
    markdown = report.render(doc)
    print(markdown)

    if not args.no_write:
        md_path, json_path = write_files(doc, markdown, args.out)
        log(f"run_all: wrote {md_path} and {json_path}")
    for p in doc["problems"]:
        log(f"run_all: !!! {p}")
    return 1 if doc["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
