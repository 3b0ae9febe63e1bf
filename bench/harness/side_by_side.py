"""Runs one benchmark binary under several rows (a mode of the binary, and
the allocator to preload for it) for several cases, every row of every case
in every round, and gives each measure's values per (case, row) in round
order -- so a ratio can be taken within a round, then the median."""
import argparse
import os
import statistics
import sys

from . import allocators, launch, result_files


def peer_rows(build_dir, mode="malloc"):
    """A row per allocator's malloc (glibc, the peers, memd's shim): the
    binary's `mode` with the allocator preloaded. Returns (rows, skipped)."""
    usable, skipped = allocators.resolve(["glibc", "jemalloc", "mimalloc", "tcmalloc", "memd"], build_dir)
    return {f"{x.name} malloc": (mode, x.preload) for x in usable}, skipped


def parse_args(doc, tool, binary_path, extra=None):
    """The runners' common command line (--build, --rounds, --no-write, and
    what `extra(parser)` adds). Returns (args, binary, launcher), the binary
    being <build>/<binary_path>; exits when either is not built."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-write", action="store_true", help="print only")
    if extra:
        extra(ap)
    a = ap.parse_args()
    binary = os.path.join(a.build, binary_path)
    launcher = os.path.join(a.build, "bench", "bench_launch")
    for path in (binary, launcher):
        if not os.path.exists(path):
            sys.exit(f"{tool}: {path} is missing (build its target)")
    return a, binary, launcher


def _run_one(launcher, binary, mode, preload, env, args):
    # Through bench_launch: the preload reaches the measured process alone,
    # inherited MEMD_* settings are dropped, and a preload ld.so refused
    # fails the run instead of silently measuring glibc.
    out = launch.run(launcher, [binary, mode] + [str(a) for a in args], preload=preload, env=env)
    if not out.ok:
        raise RuntimeError(f"{os.path.basename(binary)} {mode} {args}: {out.error}\n{out.stderr_tail}")
    values = {}
    for key, value in out.values.items():
        try:
            values[key] = float(value)
        except ValueError:
            pass
    # The process's own page faults and peak resident memory (wait4).
    values["minflt"], values["maxrss_kib"] = float(out.minflt), float(out.maxrss_kib)
    return values


def run_rounds(launcher, binary, rows, cases, rounds, warm=False):
    """rows: {name: (mode, preload or None[, env for the workload])}; cases:
    {case: [args after the mode]}. Returns {(case, row): {measure: [value per
    round]}}, the measures being the binary's key=value output, minflt and
    maxrss_kib. `warm`: each measured run follows an unmeasured one of the
    same row, for workloads where a row would pay for the one before it
    (fresh memory on a virtual machine: the first run to use huge pages
    after runs on small ones pays the host's first touch of that memory,
    several times the rest)."""
    results = {(c, r): {} for c in cases for r in rows}
    for _ in range(rounds):
        for case, args in cases.items():
            for name, row in rows.items():
                mode, preload, env = (tuple(row) + (None,))[:3]
                if warm:
                    _run_one(launcher, binary, mode, preload, env, args)
                for key, value in _run_one(launcher, binary, mode, preload, env, args).items():
                    results[(case, name)].setdefault(key, []).append(value)
    return results


def skipped_lines(skipped):
    """The report's line naming the allocators not run, and why (none: [])."""
    if not skipped:
        return []
    return [f"Skipped: {', '.join(f'{k} ({v})' for k, v in skipped.items())}", ""]


def paired_ratio(values, base):
    """The median over rounds of values[i] / base[i]."""
    return statistics.median(v / b for v, b in zip(values, base))


def print_and_write(md, results_dir, prefix, day, tool, write=True):
    """Prints the report and, unless write is false, writes it to
    <results_dir>/<prefix>-<day>[-N].md."""
    print(md)
    if write:
        stem = result_files.unused_stem(results_dir, prefix, day)
        with open(stem + ".md", "w") as f:
            f.write(md + "\n")
        print(f"{tool}: wrote {stem}.md", file=sys.stderr)
