#!/usr/bin/env python3
"""The Vmalloc paper's Table 3 on real programs: records allocation traces of
programs from Debian under memd's malloc shim (MEMD_TRACE), then replays each
with `memdctl replay` under memd's region methods (Vmbest in a region, Vmpool
for the trace's most frequent size beside it, Vmlast) and under glibc,
jemalloc, mimalloc and tcmalloc, every target once per round. Writes
bench/results/table3-<date>.md with the command, machine and tree.

  python3 bench/shared/run_table3.py --build build/release [--rounds 5]

The traces are made here, each run (they are tens of megabytes): cc1plus
compiling one of memd's sources, python3 building and parsing JSON, and
python3 parsing a generated module into its syntax tree. Each trace keeps the calls of the program's busiest
thread (the compiler proper, not the gcc driver).
"""
import argparse
import collections
import datetime
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "bench"))
from harness import machine, result_files  # noqa: E402

TARGETS = ["glibc", "jemalloc", "mimalloc", "tcmalloc", "memd-best", "memd-region", "memd-pool", "memd-last"]

PYTHON_JSON = ("import json\n"
               "d = [{'name%d' % i: [str(j) * 3 for j in range(12)], 'n': i} for i in range(8000)]\n"
               "s = json.dumps(d)\n"
               "e = json.loads(s)\n"
               "assert len(e) == len(d)\n")


# A parser that keeps what it makes: Python's own, on a generated module.
PYTHON_AST = ("import ast, sys\n"
              "tree = ast.parse(open(sys.argv[1]).read())\n"
              "assert len(tree.body) > 1000\n")


def programs(scratch):
    module = os.path.join(scratch, "module.py")
    rng = random.Random(7)
    with open(module, "w") as f:
        for i in range(1500):
            args = ", ".join(f"a{j}" for j in range(rng.randint(1, 5)))
            f.write(f"def f{i}({args}):\n    x = [a0 * {i}, '{'s' * rng.randint(1, 30)}', {{'k': a0}}]\n"
                    f"    return sum(len(str(v)) for v in x) + {rng.randint(0, 999)}\n\n")
    return {
        # A compiler: cc1plus, the case the paper's C++parser stands for.
        "cc1plus": ["g++", "-std=c++20", "-O1", "-I", TOP, "-c", os.path.join(TOP, "heap", "page_heap.cc"),
                    "-o", os.devnull],
        # An interpreter building and parsing a document.
        "python-json": [sys.executable, "-c", PYTHON_JSON],
        # A parser that frees little until it is done (the paper's C++parser case).
        "python-ast": [sys.executable, "-c", PYTHON_AST, module],
    }


def record(shim, name, argv, scratch):
    raw = os.path.join(scratch, name + ".all.trace")
    env = dict(os.environ, LD_PRELOAD=shim, MEMD_TRACE=raw, PYTHONMALLOC="malloc", LC_ALL="C")
    for v in ("VMDEBUG", "VMPROFILE", "MEMD_METHOD", "MEMD_REGION"):
        env.pop(v, None)
    run = subprocess.run(argv, env=env, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"run_table3: {name} failed ({run.returncode}): {run.stderr[-2000:]}")
    threads = collections.Counter()
    with open(raw) as f:
        for line in f:
            threads[line.split(":")[6]] += 1
    busiest = threads.most_common(1)[0][0]
    path = os.path.join(scratch, name + ".trace")
    with open(raw) as f, open(path, "w") as out:
        for line in f:
            if line.split(":")[6] == busiest:
                out.write(line)
    os.unlink(raw)
    return path


def replay(memdctl, trace, rounds):
    run = subprocess.run([memdctl, "replay", trace, "--method", "best,region,pool,last",
                          "--allocators", "glibc,jemalloc,mimalloc,tcmalloc", "--rounds", str(rounds), "--json"],
                         capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"run_table3: memdctl replay failed ({run.returncode}): {run.stdout[-2000:]} {run.stderr[-2000:]}")
    return {row["target"]: row for row in json.loads(run.stdout)}


def paired(rows, a, b, key):
    """The median over rounds of a's figure over b's, both from one round."""
    ratios = []
    for ra, rb in zip(rows[a].get("rounds", []), rows[b].get("rounds", [])):
        if ra is not None and rb is not None and rb[key] > 0:
            ratios.append(ra[key] / rb[key])
    return statistics.median(ratios) if ratios else float("nan")


def render(results, calls, command, load_before, load_after):
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    out = machine.report_header("Table 3 on real programs: memd's region methods on recorded traces", now, command,
                                ["libjemalloc2", "libmimalloc2.0", "libgoogle-perftools4", "libc6", "gcc", "python3"],
                                TOP, load_before, load_after) + [
        "Each trace was recorded here under libmemd-malloc.so (MEMD_TRACE) and keeps the calls of the program's "
        "busiest thread. `memd-replay` makes the traced calls in order on one thread, writing a byte per page of "
        "each block; time is the replay's, space the peak of resident memory over what the process had before "
        "the first call. Every round runs every target once; ratios are taken per round, then the median. "
        "glibc, jemalloc, mimalloc, tcmalloc and memd-best (the shim's process heap) are malloc in the replaying "
        "process; memd-region, memd-pool and memd-last call vmalloc.h regions of private memory (a POSIX shm "
        "object whose name is removed at once, so its pages are committed with fallocate as it grows): "
        "memd-region is one Vmbest region; memd-pool sends the trace's most frequent size to a Vmpool region "
        "and every other size to a Vmbest one; memd-last sends everything to one Vmlast region, which ignores a "
        "free of any block but the most recent, as Vmlast does.",
        "",
    ]
    for name, rows in results.items():
        out += [f"## {name} ({calls[name]} calls)", "",
                "| target | seconds | time × glibc | space KiB | space × glibc |", "|---|---|---|---|---|"]
        for t in TARGETS:
            r = rows.get(t)
            if r is None or "error" in r:
                out.append(f"| {t} | {r['error'] if r else 'missing'} | | | |")
                continue
            out.append(f"| {t} | {r['seconds']:.4f} | {r['time_vs_glibc']:.2f} | {r['space_kib']:.0f} | "
                       f"{r['space_vs_glibc']:.2f} |")
        out += ["", "Against Vmbest in a region of the same kind (paired per round):", "",
                "| method | time × memd-region | space × memd-region |", "|---|---|---|"]
        for t in ("memd-pool", "memd-last"):
            if t in rows and "rounds" in rows[t] and "memd-region" in rows:
                out.append(f"| {t} | {paired(rows, t, 'memd-region', 'seconds'):.2f} | "
                           f"{paired(rows, t, 'memd-region', 'space_kib'):.2f} |")
        out.append("")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-write", action="store_true", help="print only")
    a = ap.parse_args()
    shim = os.path.abspath(os.path.join(a.build, "client", "libmemd-malloc.so"))
    memdctl = os.path.abspath(os.path.join(a.build, "tools", "memdctl", "memdctl"))
    for path in (shim, memdctl):
        if not os.path.exists(path):
            sys.exit(f"run_table3: {path} is missing: build first")
    load_before = os.getloadavg()
    results, calls = {}, {}
    with tempfile.TemporaryDirectory(prefix="memd-table3-") as scratch:
        for name, argv in programs(scratch).items():
            trace = record(shim, name, argv, scratch)
            rows = replay(memdctl, trace, a.rounds)
            results[name] = rows
            calls[name] = rows["glibc"].get("calls", "?")
            os.unlink(trace)
    load_after = os.getloadavg()
    command = " ".join(["python3", "bench/shared/run_table3.py", "--build", a.build, "--rounds", str(a.rounds)])
    md = render(results, calls, command, load_before, load_after)
    print(md)
    if not a.no_write:
        stem = result_files.unused_stem(os.path.join(TOP, "bench", "results"), "table3", md.split(" — ")[1][:10])
        with open(stem + ".md", "w") as f:
            f.write(md + "\n")
        print(f"run_table3: wrote {stem}.md", file=sys.stderr)


if __name__ == "__main__":
    main()
