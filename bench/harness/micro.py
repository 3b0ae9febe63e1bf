"""Runs bench_malloc_micro (Google Benchmark) under one allocator and turns
its JSON into nanoseconds per malloc/free pair, keyed by (benchmark, size).
A case run by N threads (Google Benchmark's threads:N) is keyed
("<benchmark>/threads:N", size), and its time is per pair of all threads
together: the inverse of their combined throughput."""
import json
import os
import tempfile

from . import launch

_NS_PER_UNIT = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def run(launcher, binary, allocator, min_time, timeout, benchmark_filter=None):
    """Returns ({(bench, size): ns_per_pair}, error or None); benchmark_filter
    is Google Benchmark's regular expression (default: every case)."""
    with tempfile.TemporaryDirectory(prefix="memd-micro-") as tmp:
        out = os.path.join(tmp, "micro.json")
        # The JSON goes to a file rather than stdout so nothing an allocator
        # prints (statistics, warnings) can corrupt it.
        argv = [binary, f"--benchmark_min_time={min_time:g}", f"--benchmark_out={out}",
                "--benchmark_out_format=json", "--benchmark_format=console"]
        if benchmark_filter:
            argv.append(f"--benchmark_filter={benchmark_filter}")
        result = launch.run(launcher, argv, allocator.preload, timeout, allocator.env)
        if not result.ok:
            return {}, result.error
        try:
            with open(out) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            return {}, f"no benchmark JSON: {e}"

    table = {}
    for b in data.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration" or "/" not in b["name"]:
            continue
        bench, size = b["name"].split("/")[:2]
        threads = int(b.get("threads", 1))
        # Counters are summed over the threads, iterations too: real_time is
        # wall time over every thread's iterations.
        pairs = float(b.get("pairs_per_iter", 1)) / threads or 1.0
        if threads > 1:
            bench += f"/threads:{threads}"
        table[(bench, int(size))] = b["real_time"] * _NS_PER_UNIT[b.get("time_unit", "ns")] / pairs
    return table, None
