#!/usr/bin/python3
"""Handing a large numpy array to worker processes: memd's arrays in a
region (python/memd) against multiprocessing.shared_memory and against
pickling the array through the pool's queue, side by side in each round.

  /usr/bin/python3 bench/python/bench_handoff.py --build build/release [--rounds 5] [--mib 100] [--workers 4]

Workers are a pool started once ("spawn"), each connected to memd with the
region open. Per round and way, in shuffled order: the parent makes the
array (allocates, fills it) — "make" — then hands it to every worker, which
views it (memd: by offset; shared_memory: by name; pickle: receives a copy)
and sums it — "hand-off", until every worker has answered. Ratios are taken
per round, then the median. The build's daemon runs for the benchmark on a
socket of its own. Writes bench/results/python-handoff-<date>.md.
"""
import argparse
import datetime
import multiprocessing
import os
import random
import shutil
import sys
import tempfile
import time
from multiprocessing import shared_memory

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "python"))
sys.path.insert(0, os.path.join(TOP, "bench"))
sys.path.insert(0, os.path.join(TOP, "tests/support"))
from memd_daemon import MemdDaemon  # noqa: E402

REGION = None  # in a worker: its memd region


def _worker_start(socket):
    global REGION
    import memd
    os.environ["MEMD_SOCKET"] = socket
    REGION = memd.connect().open("handoff", create=False)


def _sum_memd(offset):
    import memd
    a = memd.ndarray(REGION, offset=offset)
    total = float(a.sum())
    del a
    return total


def _sum_shared_memory(name_and_count):
    name, count = name_and_count
    shm = shared_memory.SharedMemory(name=name)
    a = np.ndarray((count,), np.float64, buffer=shm.buf)
    total = float(a.sum())
    del a
    shm.close()
    return total


def _sum_array(a):
    return float(a.sum())


def _fill(a):
    a[:] = 1.0
    a[::4096] = 2.0


def run_memd(pool, region, count, workers):
    import memd
    t0 = time.perf_counter()
    a = memd.ndarray(region, (count,), np.float64)
    _fill(a)
    t1 = time.perf_counter()
    sums = pool.map(_sum_memd, [memd.offset_of(a)] * workers, chunksize=1)
    t2 = time.perf_counter()
    expected = float(a.sum())
    del a
    return t1 - t0, t2 - t1, sums, expected


def run_shared_memory(pool, region, count, workers):
    t0 = time.perf_counter()
    shm = shared_memory.SharedMemory(create=True, size=count * 8)
    a = np.ndarray((count,), np.float64, buffer=shm.buf)
    _fill(a)
    t1 = time.perf_counter()
    sums = pool.map(_sum_shared_memory, [(shm.name, count)] * workers, chunksize=1)
    t2 = time.perf_counter()
    expected = float(a.sum())
    del a
    shm.close()
    shm.unlink()
    return t1 - t0, t2 - t1, sums, expected


def run_pickle(pool, region, count, workers):
    t0 = time.perf_counter()
    a = np.empty((count,), np.float64)
    _fill(a)
    t1 = time.perf_counter()
    sums = pool.map(_sum_array, [a] * workers, chunksize=1)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, sums, float(a.sum())


WAYS = {"memd": run_memd, "shared_memory": run_shared_memory, "pickle": run_pickle}


def median(values):
    values = sorted(values)
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build/release")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--mib", type=int, default=100)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    build = os.path.abspath(args.build)
    os.environ.setdefault("MEMD_LIBRARY", os.path.join(build, "client/libmemd.so.0"))
    root = tempfile.mkdtemp(prefix="memd-handoff-")
    daemon = MemdDaemon(os.path.join(build, "daemon/memd"), root, namespace=f"bench{os.getpid()}").start()
    sock = daemon.socket
    os.environ["MEMD_SOCKET"] = sock
    os.environ["PYTHONPATH"] = os.path.join(TOP, "python") + os.pathsep + os.environ.get("PYTHONPATH", "")
    import memd
    from harness import machine
    count = args.mib * (1 << 20) // 8
    load_before = os.getloadavg()
    rows = {way: [] for way in WAYS}
    try:
        client = memd.connect()
        region = client.open("handoff", max_bytes=(2 * args.mib + 64) << 20)
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(args.workers, initializer=_worker_start, initargs=(sock,)) as pool:
            order = list(WAYS)
            for r in range(args.rounds + 1):  # round 0 warms up and is not kept
                random.Random(r).shuffle(order)
                for way in order:
                    make, handoff, sums, expected = WAYS[way](pool, region, count, args.workers)
                    if sums != [expected] * args.workers:
                        sys.exit(f"{way}: the workers summed {sums}, expected {expected}")
                    if r > 0:
                        rows[way].append((make, handoff))
        region.close()
        client.close()
    finally:
        daemon.stop()
        daemon.remove_shm()
        shutil.rmtree(root, ignore_errors=True)
    load_after = os.getloadavg()

    date = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    command = "/usr/bin/python3 bench/python/bench_handoff.py " + " ".join(sys.argv[1:])
    lines = machine.report_header("Handing a numpy array to worker processes: memd, shared_memory, pickle", date,
                                  command, ["python3-numpy", "python3.11"], TOP, load_before, load_after)
    nbytes = count * 8
    lines += [
        f"An array of {args.mib} MiB (float64) made by the parent and handed to {args.workers} worker processes "
        f"(a spawned multiprocessing pool, each already connected to memd with the region open), each of which "
        f"views it and sums it. **make**: allocate and fill the array in the parent; **hand-off**: until every "
        f"worker has answered. memd: `memd.ndarray` in a shm region through the daemon, sent as its offset; "
        f"shared_memory: `multiprocessing.shared_memory.SharedMemory`, sent as its name; pickle: the array itself "
        f"through the pool's queue (one copy per worker). Median of {args.rounds} rounds after one warm-up; every "
        f"round runs every way in shuffled order, and ratios are taken per round, then the median. None of the "
        f"three is durable here (memd's region is shm).",
        "",
        "| way | make ms | hand-off ms | GB/s handed (workers × size / hand-off) | hand-off vs memd | make vs memd |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for way in WAYS:
        make = median([m for m, _ in rows[way]])
        handoff = median([h for _, h in rows[way]])
        vs_handoff = median([h / rows["memd"][i][1] for i, (_, h) in enumerate(rows[way])])
        vs_make = median([m / rows["memd"][i][0] for i, (m, _) in enumerate(rows[way])])
        lines.append(f"| {way} | {make * 1e3:.1f} | {handoff * 1e3:.1f} | {args.workers * nbytes / handoff / 1e9:.2f} "
                     f"| {vs_handoff:.2f}× | {vs_make:.2f}× |")
    lines.append("")
    markdown = "\n".join(lines)
    print(markdown)
    if not args.no_write:
        from harness.result_files import unused_stem
        path = unused_stem(os.path.join(TOP, "bench/results"), "python-handoff", date[:10]) + ".md"
        with open(path, "w") as f:
            f.write(markdown)
        print(f"wrote {os.path.relpath(path, TOP)}", file=sys.stderr)


if __name__ == "__main__":
    main()
