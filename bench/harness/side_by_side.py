"""Runs one benchmark binary under several rows (a mode of the binary, and
the allocator to preload for it) for several cases, every row of every case
in every round, and gives each measure's values per (case, row) in round
order -- so a ratio can be taken within a round, then the median."""
import os
import statistics
import subprocess
import sys

from . import allocators, result_files


def peer_rows(build_dir, mode="malloc"):
    """A row per allocator's malloc (glibc, the peers, memd's shim): the
    binary's `mode` with the allocator preloaded. Returns (rows, skipped)."""
    usable, skipped = allocators.resolve(["glibc", "jemalloc", "mimalloc", "tcmalloc", "memd"], build_dir)
    return {f"{x.name} malloc": (mode, x.preload) for x in usable}, skipped


def _run_one(binary, mode, preload, args):
    env = dict(os.environ)
    if preload:
        env["LD_PRELOAD"] = preload
    out = subprocess.run([binary, mode] + [str(a) for a in args], capture_output=True, text=True, env=env,
                         check=True).stdout
    values = {}
    for token in out.split():
        key, sep, value = token.partition("=")
        if sep:
            try:
                values[key] = float(value)
            except ValueError:
                pass
    return values


def run_rounds(binary, rows, cases, rounds):
    """rows: {name: (mode, preload or None)}; cases: {case: [args after the
    mode]}. Returns {(case, row): {measure: [value per round]}}."""
    results = {(c, r): {} for c in cases for r in rows}
    for _ in range(rounds):
        for case, args in cases.items():
            for name, (mode, preload) in rows.items():
                for key, value in _run_one(binary, mode, preload, args).items():
                    results[(case, name)].setdefault(key, []).append(value)
    return results


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
