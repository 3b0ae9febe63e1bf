#!/usr/bin/env python3
"""Instructions per malloc/free pair under valgrind's callgrind: the steady
counterpart of run_telemetry.py's times (a shared machine's speed drifts;
its instruction counts do not).

Each case runs pair_loop twice, with N and N + 1,024,000 pairs; the
difference over 1,024,000 is the cost of one pair (start-up and exit
cancel out), loop included. Cases: the shim from before telemetry
(--pre-shim), this tree's shim with telemetry off, on at the default
sampling rate (no daemon: reports are dropped and counted, which happens
on the reporter thread, outside the loop), and glibc.

    python3 bench/telemetry/instructions_per_pair.py --build build/release --pre-shim PATH
"""
import argparse
import datetime
import os
import re
import subprocess
import sys
import tempfile

TELEMETRY_DIR = os.path.dirname(os.path.abspath(__file__))
BENCH_DIR = os.path.dirname(TELEMETRY_DIR)
REPO_DIR = os.path.dirname(BENCH_DIR)
sys.path.insert(0, BENCH_DIR)
from harness import machine  # noqa: E402
from harness.result_files import unused_stem  # noqa: E402

SIZES = (16, 64, 256, 4096, 65536)
EXTRA = 1_024_000


def instructions(loop, preload, env_extra, n, size, batch):
    # valgrind limits address space: a heap of 2 GiB (the shim from before
    # telemetry cannot fall back to less than it is told).
    env = dict(os.environ, MEMD_QUIET="1", MEMD_RESERVE_GB="2", **env_extra)
    if preload:
        env["LD_PRELOAD"] = preload
    r = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", loop, str(n), str(size),
                        str(batch)], env=env, capture_output=True, text=True, check=True)
    return int(re.findall(r"Collected : (\d+)", r.stderr)[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", required=True)
    p.add_argument("--pre-shim", required=True, help="libmemd-malloc.so built from the commit before telemetry")
    p.add_argument("--out", default=os.path.join(BENCH_DIR, "results"))
    args = p.parse_args()
    shim = os.path.abspath(os.path.join(args.build, "client", "libmemd-malloc.so"))
    with tempfile.TemporaryDirectory(prefix="memd-pairs-") as tmp:
        loop = os.path.join(tmp, "pair_loop")
        subprocess.run(["cc", "-O2", "-o", loop, os.path.join(TELEMETRY_DIR, "pair_loop.c")], check=True)
        sock = os.path.join(tmp, "no-daemon.sock")
        cases = [("glibc", None, {}), ("memd-pre-telemetry", os.path.abspath(args.pre_shim), {}),
                 ("memd", shim, {}),
                 ("memd-telemetry", shim, {"MEMD_TELEMETRY": "1", "MEMD_SOCKET": sock})]
        rows = []
        for batch in (0, 1):
            for size in SIZES:
                row = {"program": f"{'batch' if batch else 'pair'} {size} B"}
                for name, lib, env in cases:
                    n0 = 102_400
                    a = instructions(loop, lib, env, n0, size, batch)
                    b = instructions(loop, lib, env, n0 + EXTRA, size, batch)
                    row[name] = (b - a) / EXTRA
                print(row, file=sys.stderr, flush=True)
                rows.append(row)
    names = [c[0] for c in cases]
    date = datetime.datetime.now().astimezone()
    m = machine.describe()
    lines = [f"# Instructions per malloc/free pair — {date.isoformat(timespec='seconds')}", "",
             f"- Command: `python3 bench/telemetry/instructions_per_pair.py --build {args.build} "
             f"--pre-shim <pre-telemetry tree>/build/release/client/libmemd-malloc.so`",
             f"- Machine: `{m['uname']}`; CPU {m['cpu_model']}, nproc {m['nproc']}; compiler {m['compiler']}",
             f"- valgrind: {subprocess.run(['valgrind', '--version'], capture_output=True, text=True).stdout.strip()}",
             f"- memd tree: {machine.git_revision(REPO_DIR)}; pre-telemetry shim: "
             f"{machine.git_revision(os.path.dirname(os.path.abspath(args.pre_shim)))}",
             "- valgrind --tool=callgrind; instructions of (N + 1,024,000) pairs less those of N pairs, over "
             "1,024,000; the loop's own instructions (about 11 per pair) included",
             "- memd cases: `MEMD_RESERVE_GB=2` (valgrind limits address space); memd-telemetry: "
             "`MEMD_TELEMETRY=1`, default sampling (512 KiB), no daemon (reports dropped)", "",
             "| program | " + " | ".join(f"`{n}`" for n in names) + " | off / pre | on / off |",
             "| --- | " + " | ".join("---:" for _ in names) + " | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['program']} | " + " | ".join(f"{r[n]:.1f}" for n in names) +
                     f" | {r['memd'] / r['memd-pre-telemetry']:.3f} | {r['memd-telemetry'] / r['memd']:.3f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    path = unused_stem(args.out, "telemetry-instructions", date.date().isoformat()) + ".md"
    with open(path, "w") as f:
        f.write(text)
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
