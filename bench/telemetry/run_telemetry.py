#!/usr/bin/env python3
"""What telemetry costs the malloc/free fast path, side by side in one run.

The same benchmark binary (bench_malloc_micro, which links no allocator) runs
under LD_PRELOAD of:

  pre-telemetry   the memd shim built from a commit before telemetry (given
                  with --pre-shim: build it from a worktree of that commit)
  memd            this tree's shim, telemetry off (counters only, no samples)
  memd-telemetry  MEMD_TELEMETRY=1, default sampling (512 KiB), reporting to
                  a real memd started here
  memd-sample-64k the same, one sample per 64 KiB

in interleaved rounds (every case once per round), and reports the median
time per malloc/free pair, its spread, and the ratios.

  run_telemetry.py --build build/release --pre-shim PATH [--rounds 5]
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import machine  # noqa: E402
from harness.result_files import write_report_files  # noqa: E402

BENCHMARKS = ["BM_pair/16", "BM_pair/64", "BM_pair/256", "BM_batch/16", "BM_batch/64", "BM_batch/256",
              "BM_pair/4096", "BM_batch/4096"]
TARGET = 0.03  # at most 3% slower at the default sampling rate


def run_case(binary, shim, env_extra, min_time):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMD_")}
    env.update(env_extra)
    env["LD_PRELOAD"] = shim
    flt = "^(" + "|".join(b.replace("/", "/") + "$" for b in BENCHMARKS) + ")"
    out = subprocess.run([binary, "--benchmark_format=json", "--benchmark_filter=" + flt,
                          "--benchmark_min_time=%s" % min_time], env=env, check=True,
                         capture_output=True, text=True).stdout
    result = {}
    for b in json.loads(out)["benchmarks"]:
        pairs = b.get("pairs_per_iter", 1) or 1
        result[b["name"]] = b["real_time"] / pairs  # ns per pair
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--pre-shim", required=True, help="libmemd-malloc.so built before telemetry")
    ap.add_argument("--pre-commit", default="e1faefa", help="the commit --pre-shim was built from")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-time", default="0.3")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()

    binary = os.path.join(args.build, "bench", "bench_malloc_micro")
    shim = os.path.abspath(os.path.join(args.build, "client", "libmemd-malloc.so"))
    memd = os.path.join(args.build, "daemon", "memd")
    work = tempfile.mkdtemp(prefix="memd-bench-telemetry-")
    sock = os.path.join(work, "memd.sock")
    daemon = subprocess.Popen([memd, "--socket", sock, "--data-dir", os.path.join(work, "data"),
                               "--shm-namespace", "benchtel%d" % os.getpid(), "--metrics-address", "127.0.0.1:0"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(500):
        if os.path.exists(sock):
            break
        time.sleep(0.01)
    cases = [
        ("pre-telemetry", os.path.abspath(args.pre_shim), {}),
        ("memd", shim, {}),
        ("memd-telemetry", shim, {"MEMD_TELEMETRY": "1", "MEMD_SOCKET": sock}),
        ("memd-sample-64k", shim, {"MEMD_TELEMETRY": "1", "MEMD_SOCKET": sock, "MEMD_SAMPLE_BYTES": "65536"}),
    ]
    load_start = os.getloadavg()
    times = {name: {} for name, _, _ in cases}
    try:
        for r in range(args.rounds):
            for name, lib, env in cases:
                for bench, ns in run_case(binary, lib, env, args.min_time).items():
                    times[name].setdefault(bench, []).append(ns)
            print("round %d of %d done" % (r + 1, args.rounds), file=sys.stderr)
    finally:
        daemon.terminate()
        daemon.wait()
        shutil.rmtree(work, ignore_errors=True)
    load_end = os.getloadavg()

    med = {n: {b: statistics.median(v) for b, v in t.items()} for n, t in times.items()}
    command = "python3 bench/telemetry/run_telemetry.py --build %s --pre-shim PATH --rounds %d --min-time %s" % (
        args.build, args.rounds, args.min_time)
    lines = ["# Telemetry on the fast path", "",
             "Command: `%s` (PATH: `client/libmemd-malloc.so` of a release build of commit %s, the one before "
             "telemetry)" % (command, args.pre_commit), "",
             "Machine: %s; %s CPUs; %s; load average %.2f at the start, %.2f at the end." % (
                 machine.describe()["cpu_model"], machine.describe()["nproc"], machine.describe()["memory"],
                 load_start[0], load_end[0]),
             "Tree measured: %s. %d interleaved rounds; medians of ns per malloc/free pair "
             "(min-max over rounds); the same `bench_malloc_micro` binary under LD_PRELOAD." % (
                 machine.git_revision("."), args.rounds), "",
             "| benchmark | pre-telemetry | memd (counters) | memd-telemetry (512 KiB) | memd-sample-64k | "
             "counters / pre | telemetry / counters | telemetry / pre | 64k / pre |",
             "|---|---|---|---|---|---|---|---|---|"]
    verdicts = []
    for bench in BENCHMARKS:
        if bench not in med["memd"]:
            continue

        def cell(name):
            v = times[name][bench]
            return "%.2f (%.2f-%.2f)" % (med[name][bench], min(v), max(v))
        pre, off, on, s64 = (med[n][bench] for n in ("pre-telemetry", "memd", "memd-telemetry", "memd-sample-64k"))
        lines.append("| %s | %s | %s | %s | %s | %.3f | %.3f | %.3f | %.3f |" % (
            bench, cell("pre-telemetry"), cell("memd"), cell("memd-telemetry"), cell("memd-sample-64k"),
            off / pre, on / off, on / pre, s64 / pre))
        verdicts.append((bench, on / off, on / pre))
    geo = lambda xs: statistics.geometric_mean(xs)  # noqa: E731
    on_off = geo([v[1] for v in verdicts])
    on_pre = geo([v[2] for v in verdicts])
    lines += ["", "Geometric mean over the benchmarks: telemetry on / off %.3f (%s the 3%% target), "
              "telemetry on / before telemetry %.3f (%s)." % (
                  on_off, "meets" if on_off <= 1 + TARGET else "misses",
                  on_pre, "meets" if on_pre <= 1 + TARGET else "misses"),
              "", "Per benchmark, against the 3% target (telemetry on / off; on / before):", ""]
    for bench, a, b in verdicts:
        lines.append("- %s: %.3f %s; %.3f %s" % (bench, a, "met" if a <= 1 + TARGET else "MISSED",
                                                 b, "met" if b <= 1 + TARGET else "MISSED"))
    markdown = "\n".join(lines) + "\n"
    doc = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "command": command,
           "machine": machine.describe(), "tree": machine.git_revision("."), "load": [load_start, load_end],
           "ns_per_pair": times, "medians": med}
    md, js = write_report_files(doc, markdown, args.out, "telemetry")
    print(markdown)
    print("written:", md, js, file=sys.stderr)


if __name__ == "__main__":
    main()
