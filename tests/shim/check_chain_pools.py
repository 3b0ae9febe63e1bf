#!/usr/bin/env python3
"""Call-chain pools under the shim (MEMD_CHAIN_POOLS=1): chain_pool_program
builds four interleaved linked lists, two from call sites of their own and
two through one allocation wrapper (of operator new).

With pools, each list's nodes must lie one after the other in memory (at
least 90% of its links), the wrapper must have been found and lengthened
(the report at exit names it, and a chain one caller longer for each of
its callers), and no chain may start inside the shim (the shim's entry
points hand the program's own return address on). Without pools the same
lists interleave (at most 10% of links adjacent): the layout is the pools'
doing. Either way the program's own checks of every node must pass,
including after another thread freed two of the lists.
"""
import argparse
import os
import re
import subprocess
import sys


def run(program, env):
    r = subprocess.run([program], env=env, capture_output=True, text=True, timeout=60)
    shares = [float(m.group(1)) for m in re.finditer(r"^list \d adjacent ([0-9.]+)$", r.stdout, re.M)]
    again = re.search(r"^again adjacent ([0-9.]+) ([0-9.]+)$", r.stdout, re.M)
    return r, shares, [float(again.group(1)), float(again.group(2))] if again else []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--program", required=True)
    args = ap.parse_args()
    lib_name = os.path.basename(args.lib)
    failures = []

    env = dict(os.environ, LD_PRELOAD=args.lib, MEMD_CHAIN_POOLS="1", MEMD_CHAIN_POOLS_REPORT="1")
    pooled, shares, again = run(args.program, env)
    if pooled.returncode != 0 or "ok" not in pooled.stdout.split():
        failures.append(f"pooled run: exit {pooled.returncode}")
    if len(shares) != 4 or min(shares) < 0.9:
        failures.append(f"pooled run: adjacent shares {shares}, want 4 of at least 0.9")
    if len(again) != 2 or min(again) < 0.9:
        failures.append(f"pooled run, after remote frees: adjacent shares {again}, want at least 0.9")
    summary = re.search(r"memd chain pools: (\d+) chains, (\d+) pooled, (\d+) lengthened.*?(\d+) unwinds",
                        pooled.stderr)
    if not summary or int(summary.group(2)) < 4 or int(summary.group(3)) < 1:
        failures.append(f"report: want at least 4 pooled chains and 1 lengthened, got {summary and summary.group(0)}")
    # The wrapper's callers are found by two loads, not an unwind per
    # allocation: 60,000 allocations go through it; the unwinds are the
    # counting's samples and one check in 1,024.
    elif int(summary.group(4)) > 5000:
        failures.append(f"report: {summary.group(4)} unwinds; the wrapper's chains unwind on every allocation")
    wrappers = re.findall(r"^  wrapper .* chain (\S+)$", pooled.stderr, re.M)
    longer = re.findall(r"^  pool \d+ +lookups \d+ chain (\S+) (\S+)$", pooled.stderr, re.M)
    if not wrappers or sum(1 for first, _ in longer if first in wrappers) < 2:
        failures.append(f"report: want a wrapper and two chains through it, got wrappers {wrappers}, chains {longer}")
    for line in pooled.stderr.splitlines():
        chain = line.partition(" chain ")[2]
        if chain and lib_name in chain.split()[0]:
            failures.append(f"report: a chain starts in the shim: {line}")

    env = dict(os.environ, LD_PRELOAD=args.lib)
    env.pop("MEMD_CHAIN_POOLS", None)
    plain, shares, _ = run(args.program, env)
    if plain.returncode != 0:
        failures.append(f"plain run: exit {plain.returncode}")
    if len(shares) != 4 or max(shares) > 0.1:
        failures.append(f"plain run: adjacent shares {shares}, want 4 of at most 0.1")

    for f in failures:
        print("FAIL:", f)
    if failures:
        print(pooled.stdout[-2000:], pooled.stderr[-3000:], plain.stdout[-1000:])
        return 1
    print("chain pools: lists laid out by chain, wrapper lengthened; plain heap interleaves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
