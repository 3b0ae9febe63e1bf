#!/usr/bin/env python3
"""Runs the shared- and persistent-heap workloads of bench_shared_heap under
every heap family (Boost.Interprocess, PMDK libpmemobj and memd::Region) side
by side, and writes a Markdown + JSON report to
bench/results/shared-<date>.md/.json, including how memd fares against the
targets in TARGETS.

Every case runs in two modes (see METHOD):
  window  every worker runs for the same fixed window (--seconds, default 1 s);
          throughput = sum over workers of (pairs_i / elapsed_i). This is the
          measure of throughput and scaling, and of the targets.
  pairs   every worker runs a fixed number of pairs (the older measure);
          kept as a secondary table for the per-pair cost and the checksums.
Two controls show what the machine's CPUs give several processes at all:
`none-private` (the same loop with no allocator, nothing shared) and
`memd-shm-separate` (independent memd-shm runs, each on its own region,
started together for one window).

Rounds are interleaved as in run_all.py: for each workload, round 1 runs every
case (allocator x process count x mode), then round 2 does the same with the
order rotated, so machine noise lands on all cases alike.

    python3 bench/shared/run_shared.py --build build/release
    python3 bench/shared/run_shared.py --build build/release --rounds 1 --only shared_small --allocators boost-shm
"""
import argparse
import datetime
import glob
import os
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

SHARED_DIR = os.path.dirname(os.path.abspath(__file__))
BENCH_DIR = os.path.dirname(SHARED_DIR)
REPO_DIR = os.path.dirname(BENCH_DIR)
sys.path.insert(0, BENCH_DIR)

from harness.result_files import publish_report, rerender_report  # noqa: E402
from harness import allocators, launch, machine, report  # noqa: E402
from harness.stats import fmt, median, ratio  # noqa: E402

PROGRAM = "bench_shared_heap"
STEM_PREFIX = "memd-bench-"  # every shm object and file the program makes starts with this
# memd's disciplines put a kShm region named N in the POSIX shm object "memd.N".
SHM_GLOBS = [f"/dev/shm/{STEM_PREFIX}*", f"/dev/shm/memd.{STEM_PREFIX}*"]
PACKAGES = ["libboost1.74-dev", "libpmemobj1", "libpmem1", "libc6"]
WINDOW_S = 1.0      # default --seconds
GO_AT_LEAD_S = 1.0  # separate runs started together are released this long after they start

WINDOW, PAIRS = "window", "pairs"

# How throughput is measured, stated once for the report and the README.
METHOD = (
    "**Throughput (pairs/s) is measured in a fixed time window**: after a common start every worker process runs "
    "the loop until the same instant, {window:g} s later, and counts its pairs; the total throughput is the sum over "
    "the processes of (pairs_i / elapsed_i), elapsed_i being that process's own loop time. Every process runs "
    "through the whole window, so this is the rate of all of them working at once, whether or not the CPUs give "
    "them equal shares. The targets, the scaling ratios and the headline ns/pair (mean over processes of "
    "elapsed_i / pairs_i, in the same window) all come from this mode. The older *fixed-pairs* measure (every "
    "process runs the same number of pairs; pairs/s = all pairs / (last end − first start)) is kept below as a "
    "secondary table: it gives the per-pair cost over a fixed sequence and the checksums, but with 2 processes "
    "its throughput also counts the time one process runs alone after the other has finished, so it mixes the "
    "allocator's scaling with how unequal the CPUs and the start times are."
)


@dataclass(frozen=True)
class Workload:
    name: str
    procs: tuple  # process counts to run
    pairs: int    # alloc+free pairs per process (before --scale)
    summary: str


WORKLOADS = [
    Workload("shared_small", (1, 2), 1_000_000,
             "8-512 B alloc+free pairs, 4096 live objects per process, 1 and 2 processes on one shared heap"),
    Workload("persistent_small", (1,), 200_000,
             "8-512 B alloc+free pairs, 4096 live objects, one process, heap in a file"),
]


@dataclass(frozen=True)
class Allocator:
    name: str
    program: str          # --allocator of bench_shared_heap
    workloads: tuple
    durability: str       # what "persisted" means for this case, for the report
    env: dict = field(default_factory=dict)
    pairs_factor: float = 1.0  # msync costs milliseconds per pair: fewer pairs, same ns/pair
    max_seconds: float = 0     # a worker's loop stops after this long (0: never), for slow disks
    memd: bool = False
    control: bool = False      # not a peer: shows what the machine gives (window mode only)
    separate: bool = False     # N independent one-process runs started together, not N workers on one heap
    daemon: bool = False       # through memd, the daemon (--daemon-socket, else the program starts one per run)


# Report order; every non-memd allocator is a peer (a ratio column).
ALLOCATORS = [
    Allocator("boost-shm", "boost-shm", ("shared_small",), "none (POSIX shm, tmpfs)"),
    Allocator("boost-file", "boost-file", ("shared_small", "persistent_small"),
              "none (mapped file, written back by the kernel)"),
    Allocator("pmemobj-atomic", "pmemobj-atomic", ("persistent_small",),
              "cache flushes (PMEM_IS_PMEM_FORCE=1)", {"PMEM_IS_PMEM_FORCE": "1"}),
    Allocator("pmemobj-tx", "pmemobj-tx", ("persistent_small",),
              "cache flushes (PMEM_IS_PMEM_FORCE=1)", {"PMEM_IS_PMEM_FORCE": "1"}),
    Allocator("pmemobj-atomic-msync", "pmemobj-atomic", ("persistent_small",),
              "msync per persist (PMEM_IS_PMEM_FORCE=0)", {"PMEM_IS_PMEM_FORCE": "0"}, 0.01, 5),
    Allocator("pmemobj-tx-msync", "pmemobj-tx", ("persistent_small",),
              "msync per persist (PMEM_IS_PMEM_FORCE=0)", {"PMEM_IS_PMEM_FORCE": "0"}, 0.01, 5),
    Allocator("memd-shm", "memd-shm", ("shared_small",), "none (POSIX shm, tmpfs)", memd=True),
    Allocator("memd-file", "memd-file", ("shared_small", "persistent_small"),
              "none per pair (mapped file, written back by the kernel; msync of the region at close)",
              memd=True),
    Allocator("memd-pmem", "memd-pmem", ("persistent_small",),
              "none per pair (file mapped through libpmem; made durable at close)", memd=True),
    Allocator("memd-daemon", "memd-daemon", ("shared_small",),
              "none (POSIX shm, tmpfs); blocks leased from memd, the daemon, over gRPC", memd=True, daemon=True),
    # A private heap, the baseline a shared one is held against: mimalloc's
    # process-local malloc/free in the same loop, nothing shared.
    Allocator("mimalloc-private", "malloc-private", ("shared_small",),
              "none (process-local mimalloc, LD_PRELOAD; nothing shared)",
              {"LD_PRELOAD": allocators.PEER_PATHS.get("mimalloc") or "libmimalloc.so.2"}),
    # Controls, shared_small only, window mode only.
    Allocator("none-private", "none-private", ("shared_small",),
              "control: the same loop with no allocator (a fixed private buffer per slot), nothing shared",
              control=True),
    Allocator("memd-shm-separate", "memd-shm", ("shared_small",),
              "control: N independent memd-shm runs of 1 process, each on its own region, one common window",
              control=True, separate=True),
]
BY_NAME = {a.name: a for a in ALLOCATORS}


@dataclass(frozen=True)
class Target:
    """A goal for memd, judged on total throughput (pairs/s) in `measure`
    mode: memd's over a peer's in the same case, or memd's own with `procs`
    processes over one."""
    goal: str
    workload: str
    memd: str
    procs: int
    minimum: float
    peer: str = ""  # empty: scaling of `memd` from 1 to `procs` processes
    measure: str = WINDOW  # the mode whose pairs/s judges it (every target: the fixed window)
    shown: str = ""  # how the report states the minimum, if not as "≥ minimum×"


# The targets the issue states; the report says which are met.
TARGETS = [
    Target("≥ 10× Boost.Interprocess, 1 process", "shared_small", "memd-shm", 1, 10, "boost-shm"),
    Target("≥ 10× Boost.Interprocess, 1 process", "shared_small", "memd-file", 1, 10, "boost-file"),
    Target("≥ 50× Boost.Interprocess, 2 processes", "shared_small", "memd-shm", 2, 50, "boost-shm"),
    Target("≥ 50× Boost.Interprocess, 2 processes", "shared_small", "memd-file", 2, 50, "boost-file"),
    Target("2 processes ≥ 1.8× the throughput of 1", "shared_small", "memd-shm", 2, 1.8),
    Target("2 processes ≥ 1.8× the throughput of 1", "shared_small", "memd-file", 2, 1.8),
    Target("≥ 10× libpmemobj, persistent alloc+free", "persistent_small", "memd-file", 1, 10, "pmemobj-atomic"),
    Target("≥ 10× libpmemobj, persistent alloc+free", "persistent_small", "memd-file", 1, 10, "pmemobj-tx"),
    Target("≥ 10× libpmemobj, persistent alloc+free", "persistent_small", "memd-file", 1, 10,
           "pmemobj-atomic-msync"),
    Target("≥ 10× libpmemobj, persistent alloc+free", "persistent_small", "memd-file", 1, 10, "pmemobj-tx-msync"),
    # Through the daemon within 1.1× of the daemonless library: at least 1/1.1 of its throughput.
    Target("within 1.2× of mimalloc's process-local pair, 1 process", "shared_small", "memd-shm", 1, 1 / 1.2,
           "mimalloc-private", shown="≥ 1/1.2 = 0.83×"),
    Target("within 1.2× of mimalloc's process-local pair, 2 processes", "shared_small", "memd-shm", 2, 1 / 1.2,
           "mimalloc-private", shown="≥ 1/1.2 = 0.83×"),
    Target("through memd within 1.1× of the daemonless library, 1 process", "shared_small", "memd-daemon", 1,
           1 / 1.1, "memd-shm", shown="≥ 1/1.1 = 0.91×"),
    Target("through memd within 1.1× of the daemonless library, 2 processes", "shared_small", "memd-daemon", 2,
           1 / 1.1, "memd-shm", shown="≥ 1/1.1 = 0.91×"),
]


def log(message):
    print(message, file=sys.stderr, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build/release", help="CMake build directory (default: build/release)")
    p.add_argument("--rounds", type=int, default=3, help="runs per case (the median is reported)")
    p.add_argument("--only", default="", help="comma list of workloads: " + ",".join(w.name for w in WORKLOADS))
    p.add_argument("--allocators", default="", help="comma list from: " + ",".join(BY_NAME) + " (default: all built)")
    p.add_argument("--procs", default="", help="comma list of process counts for shared_small (default 1,2)")
    p.add_argument("--scale", type=float, default=1.0, help="multiplies every case's number of pairs "
                                                            "(fixed-pairs mode)")
    p.add_argument("--seconds", type=float, default=WINDOW_S,
                   help=f"the fixed window of the throughput mode, in seconds (default {WINDOW_S:g})")
    p.add_argument("--dir", default="", help="directory for mapped files, pools and sockets "
                                             "(default: <build>/bench/shared-tmp)")
    p.add_argument("--daemon-socket", default="", help="memd-daemon: a running memd to use (default: every run "
                                                       "starts its own, the memd of the same build)")
    p.add_argument("--timeout", type=float, default=300, help="seconds before a single run is killed")
    p.add_argument("--out", default=os.path.join(BENCH_DIR, "results"), help="directory for the report files")
    p.add_argument("--no-write", action="store_true", help="print the report only, write no files")
    args = p.parse_args()
    split = lambda s: [x.strip() for x in s.split(",") if x.strip()]
    args.only, args.allocators = split(args.only), split(args.allocators)
    unknown = [w for w in args.only if w not in {w.name for w in WORKLOADS}]
    if unknown:
        p.error(f"unknown workload(s) {unknown}")
    unknown = [a for a in args.allocators if a not in BY_NAME]
    if unknown:
        p.error(f"unknown allocator(s) {unknown}; choose from {list(BY_NAME)}")
    try:
        args.procs = [int(n) for n in split(args.procs)]
    except ValueError:
        p.error("--procs takes a comma list of integers")
    if args.rounds < 1 or args.scale <= 0 or args.seconds <= 0 or any(n < 1 for n in args.procs):
        p.error("--rounds, --scale, --seconds and --procs must be positive")
    return args


def compiled_in(binary):
    out = subprocess.run([binary, "--list"], capture_output=True, text=True, check=True).stdout
    return {line.split("\t")[0] for line in out.splitlines() if line.strip()}


def _relative(path):
    """Paths in a saved report are relative to the source tree (no machine paths)."""
    return os.path.relpath(path, REPO_DIR) if path.startswith(REPO_DIR + os.sep) else path


def file_system(path):
    """('ext2/ext3', 'ext4 /dev/vda'): what `stat -f -c %T` says, and the mount."""
    st = subprocess.run(["stat", "-f", "-c", "%T", path], capture_output=True, text=True).stdout.strip()
    mount = subprocess.run(["findmnt", "-n", "-o", "FSTYPE,SOURCE", "--target", path],
                           capture_output=True, text=True).stdout.strip() if shutil.which("findmnt") else ""
    mount = mount.splitlines()[0] if mount else ""  # stacked mounts: the first line is the one in use
    return {"path": _relative(path), "stat_f_type": st or "unknown", "mount": " ".join(mount.split()) or "unknown"}


@dataclass(frozen=True)
class Case:
    workload: Workload
    allocator: Allocator
    procs: int
    pairs: int
    mode: str  # WINDOW or PAIRS

    @property
    def key(self):
        return f"{self.workload.name}/{self.allocator.name}/{self.procs}/{self.mode}"


def plan(args, available):
    """The cases to run, per workload, and {allocator: why skipped}."""
    skipped = {}
    wanted = [a.name for a in ALLOCATORS if not args.allocators or a.name in args.allocators]  # report order
    allocators = []
    for name in wanted:
        a = BY_NAME[name]
        if a.program in available:
            allocators.append(a)
        elif a.memd:
            skipped[name] = f"not compiled into {PROGRAM} (an old build? memd_heap.cc is always built now)"
        else:
            skipped[name] = f"not compiled into {PROGRAM} (its library was not found at configure time)"
    by_workload = {}
    for w in WORKLOADS:
        if args.only and w.name not in args.only:
            continue
        procs = tuple(args.procs) if args.procs and w.name == "shared_small" else w.procs
        cases = []
        for a in allocators:
            if w.name not in a.workloads:
                continue
            for n in procs:
                if n > 1 and a.program.startswith("pmemobj"):
                    continue  # a pmemobj pool is open in one process at a time
                if a.separate and n == 1:
                    continue  # one separate run is the plain 1-process case
                pairs = max(1, round(w.pairs * args.scale * a.pairs_factor))
                for mode in (WINDOW,) if a.control else (WINDOW, PAIRS):
                    cases.append(Case(w, a, n, pairs, mode))
        if cases:
            by_workload[w.name] = cases
    return by_workload, skipped


def shm_objects():
    return {path for pattern in SHM_GLOBS for path in glob.glob(pattern)}


def leftovers(before):
    return shm_objects() - before


REQUIRED = ("mode", "ns_per_pair", "pairs_per_s", "sum_pairs_per_s", "span_pairs_per_s", "worker_pairs_per_s",
            "overlap", "pairs", "checksum", "shared_check", "capped", "first_start_ns", "last_start_ns",
            "first_end_ns", "last_end_ns", "go_late_ns")


def _combine_separate(values):
    """The key=value outputs of N one-process runs that shared one window, as
    if they were one run of N workers (throughput: the sum of their rates)."""
    ints = lambda k: [int(v[k]) for v in values]
    first_start, last_start = min(ints("first_start_ns")), max(ints("first_start_ns"))
    first_end, last_end = min(ints("last_end_ns")), max(ints("last_end_ns"))
    span = last_end - first_start
    rates = [float(v["sum_pairs_per_s"]) for v in values]
    pairs = sum(ints("pairs"))
    return {
        "mode": values[0]["mode"], "window_s": values[0]["window_s"], "procs": str(len(values)),
        "pairs": str(pairs), "pairs_per_s": f"{sum(rates):.1f}", "sum_pairs_per_s": f"{sum(rates):.1f}",
        "span_pairs_per_s": f"{pairs * 1e9 / span:.1f}", "worker_pairs_per_s": ",".join(f"{r:.1f}" for r in rates),
        "ns_per_pair": f"{sum(float(v['ns_per_pair']) for v in values) / len(values):.2f}",
        "overlap": f"{max(0, first_end - last_start) / span:.3f}",
        "first_start_ns": str(first_start), "last_start_ns": str(last_start), "first_end_ns": str(first_end),
        "last_end_ns": str(last_end), "go_late_ns": str(max(ints("go_late_ns"))),
        "checksum": "+".join(v["checksum"] for v in values),
        "shared_check": "FAIL" if any(v["shared_check"] == "FAIL" for v in values) else values[0]["shared_check"],
        "capped": "0",
    }


def run_case(args, case, binary, launcher, work_dir, shm_before):
    argv = [binary, "--allocator", case.allocator.program, "--workload", case.workload.name, "--dir", work_dir]
    if case.allocator.daemon and getattr(args, "daemon_socket", ""):
        argv += ["--daemon-socket", args.daemon_socket]
    if case.mode == WINDOW:
        argv += ["--seconds", f"{args.seconds:g}"]
    else:
        argv += ["--pairs", str(case.pairs)]
        if case.allocator.max_seconds:
            argv += ["--max-seconds", f"{case.allocator.max_seconds:g}"]
    if case.allocator.separate:
        # N independent runs, one process each, released at the same instant
        # (CLOCK_MONOTONIC, as the program's own clock) for the same window.
        go_at = time.monotonic_ns() + int(GO_AT_LEAD_S * 1e9)
        one = argv + ["--procs", "1", "--go-at", str(go_at)]
        with ThreadPoolExecutor(case.procs) as pool:
            results = list(pool.map(lambda _: launch.run(launcher, one, None, args.timeout, case.allocator.env),
                                    range(case.procs)))
        bad = [r for r in results if not r.ok]
        r = bad[0] if bad else results[0]
        v = r.values
        if not bad and all(all(k in x.values for k in REQUIRED) for x in results):
            v = _combine_separate([x.values for x in results])
        wall = max((x.wall_s or 0) for x in results)
    else:
        r = launch.run(launcher, argv + ["--procs", str(case.procs)], None, args.timeout, case.allocator.env)
        v, wall = r.values, r.wall_s
    rec = {"workload": case.workload.name, "allocator": case.allocator.name, "procs": case.procs,
           "mode": case.mode, "pairs_per_proc": case.pairs if case.mode == PAIRS else None,
           "window_s": args.seconds if case.mode == WINDOW else None,
           "ok": r.ok, "error": r.error, "wall_s": wall, "utime_s": r.utime_s, "stime_s": r.stime_s, "values": v,
           "stderr_tail": r.stderr_tail.replace(REPO_DIR + os.sep, "")}
    if v.get("shared_check") == "FAIL":  # the program also exits with status 1
        rec["ok"], rec["error"] = False, "the parent did not see the workers' live objects in the heap"
    elif r.ok:
        missing = [k for k in REQUIRED if k not in v]
        if missing:
            rec["ok"], rec["error"] = False, "output lacks " + ", ".join(missing)
    # A run killed by the timeout cannot remove its heap.
    for path in leftovers(shm_before):
        os.unlink(path)
    for path in glob.glob(os.path.join(work_dir, STEM_PREFIX + "*")):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)  # a daemon's directory (memd-daemon)
        else:
            os.unlink(path)
    return rec


def summarise(runs):
    bad = [r for r in runs if not r["ok"]]
    if bad:
        return {"failed": True, "error": bad[0]["error"], "rounds": len(runs)}
    num = lambda key: [float(r["values"][key]) for r in runs]
    ns, rate = num("ns_per_pair"), num("pairs_per_s")
    window = runs[0]["mode"] == WINDOW
    # A run stopped by --max-seconds did fewer pairs: its checksum compares with
    # nothing; nor does a window run's (its pairs depend on the speed).
    full = [r for r in runs if r["values"]["capped"] == "0" and not window]

    def balance(r):  # slowest process's rate / fastest's
        rates = [float(x) for x in r["values"]["worker_pairs_per_s"].split(",")]
        return min(rates) / max(rates) if max(rates) > 0 else None

    return {
        "failed": False, "rounds": len(runs), "mode": runs[0]["mode"], "window_s": runs[0]["window_s"],
        "ns_per_pair": median(ns), "ns_min": min(ns), "ns_max": max(ns),
        "pairs_per_s": median(rate), "pairs_per_s_min": min(rate), "pairs_per_s_max": max(rate),
        "sum_pairs_per_s": median(num("sum_pairs_per_s")), "span_pairs_per_s": median(num("span_pairs_per_s")),
        "overlap": median(num("overlap")),
        "balance": median([balance(r) for r in runs]),
        "go_late_ms_max": max(num("go_late_ns")) / 1e6,
        "pairs_per_proc": runs[0]["pairs_per_proc"],
        "pairs_done_per_proc": median([int(r["values"]["pairs"]) // r["procs"] for r in runs]),
        "capped_rounds": 0 if window else sum(r["values"]["capped"] != "0" for r in runs),
        "checksums": sorted({r["values"]["checksum"] for r in full}),
        "shared_check": sorted({r["values"]["shared_check"] for r in runs}),
        # Per round, for ratios paired within a round (paired() below).
        "by_round": {r["round"]: {"pairs_per_s": float(r["values"]["pairs_per_s"]),
                                  "ns_per_pair": float(r["values"]["ns_per_pair"])} for r in runs},
    }


def paired_rounds(a, b, key):
    """a[key] / b[key] in each round both ran, in round order: every round runs
    every case, so the ratio is taken within a round, never across."""
    ra, rb = a.get("by_round", {}), b.get("by_round", {})
    return [ratio(ra[r][key], rb[r][key]) for r in sorted(set(ra) & set(rb)) if ratio(ra[r][key], rb[r][key])]


def paired(a, b, key):
    """The median over rounds of a[key] / b[key] taken within each round."""
    values = paired_rounds(a, b, key)
    return median(values) if values else None


def uncommitted_outside_bench():
    """Paths outside bench/ with uncommitted changes when the run started: the
    library measured is the commit plus these (as they were at build time)."""
    try:
        out = subprocess.run(["git", "status", "--porcelain"], cwd=REPO_DIR, capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    paths = [line[3:].split(" -> ")[-1] for line in out.splitlines() if len(line) > 3]
    return sorted(p for p in paths if not p.startswith("bench/"))


def load_average():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def build_document(args, by_workload, skipped, runs, work_dir, load_before):
    peers = [a.name for a in ALLOCATORS if not a.memd and not a.control]
    doc = {
        "command": "python3 " + " ".join(shlex.quote(a) for a in sys.argv),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": machine.describe(),
        "packages": machine.package_versions(PACKAGES),
        "memd_revision": machine.git_revision(REPO_DIR),
        "uncommitted_outside_bench": uncommitted_outside_bench(),
        "file_systems": {"files (--dir)": file_system(work_dir), "POSIX shm": file_system("/dev/shm")},
        "load_average": {"before": load_before, "after": load_average()},
        "settings": {"rounds": args.rounds, "scale": args.scale, "window_s": args.seconds, "build": args.build,
                     "skipped": skipped,
                     "inherited_env": sorted(k for k in os.environ if k.startswith(("PMEM", "MEMD_")))},
        "method": METHOD.format(window=args.seconds),
        "workloads": {}, "problems": [], "runs": runs,
    }
    for wname, cases in by_workload.items():
        w = cases[0].workload
        cells = {}
        for c in cases:
            cell = summarise([r for r in runs if r["workload"] == wname and r["allocator"] == c.allocator.name
                              and r["procs"] == c.procs and r["mode"] == c.mode])
            cell.update({"allocator": c.allocator.name, "procs": c.procs, "mode": c.mode,
                         "durability": c.allocator.durability, "env": c.allocator.env,
                         "peer": c.allocator.name in peers, "control": c.allocator.control,
                         "separate": c.allocator.separate})
            cells[c.key] = cell
            if cell["failed"]:
                doc["problems"].append(f"{c.key} failed: {cell['error']}")
            elif len(cell["checksums"]) > 1:
                doc["problems"].append(f"{c.key}: checksum differs between rounds {cell['checksums']}")
        # Same process count and pairs: same sequence, so the same checksum.
        groups = {}
        for cell in cells.values():
            if not cell["failed"] and cell["mode"] == PAIRS and len(cell["checksums"]) == 1:
                groups.setdefault((cell["procs"], cell["pairs_per_proc"]), {})[cell["allocator"]] = cell["checksums"][0]
        for (procs, pairs), sums in groups.items():
            if len(set(sums.values())) > 1:
                doc["problems"].append(f"CHECKSUM MISMATCH {wname} procs={procs} pairs={pairs}: {sums}")
        for cell in cells.values():
            if not cell["failed"] and cell["mode"] == WINDOW and cell["go_late_ms_max"] > 0.5 * args.seconds * 1e3:
                doc["problems"].append(f"{cell['allocator']}/{cell['procs']}: a separate run was released "
                                       f"{cell['go_late_ms_max']:.0f} ms after the common start")
        doc["workloads"][wname] = {"summary": w.summary, "cells": cells}
    doc["targets"] = evaluate_targets(doc)
    doc["controls"] = evaluate_controls(doc)
    return doc


def evaluate_targets(doc):
    """One record per target whose cases ran: throughput and ns/pair ratios, met or not."""
    out = []
    for t in TARGETS:
        cells = doc["workloads"].get(t.workload, {}).get("cells", {})

        def pick(mode):
            return (cells.get(f"{t.workload}/{t.memd}/{t.procs}/{mode}"),
                    cells.get(f"{t.workload}/{t.peer}/{t.procs}/{mode}" if t.peer
                              else f"{t.workload}/{t.memd}/1/{mode}"))

        mine, base = pick(t.measure)
        if mine is None or base is None:
            continue  # not run (--only, --allocators, --procs)
        rec = {"goal": t.goal, "workload": t.workload, "memd": t.memd, "procs": t.procs, "minimum": t.minimum,
               "shown_minimum": t.shown or f"≥ {t.minimum:g}×",
               "against": t.peer or f"{t.memd}, 1 process", "kind": "peer" if t.peer else "scaling",
               "measure": t.measure, "window_s": mine.get("window_s")}
        # The other mode's throughput ratio, shown beside the judged one (never judged).
        other_mine, other_base = pick(PAIRS if t.measure == WINDOW else WINDOW)
        if other_mine and other_base and not other_mine["failed"] and not other_base["failed"]:
            rec["secondary_measure"] = PAIRS if t.measure == WINDOW else WINDOW
            rec["secondary_ratio"] = paired(other_mine, other_base, "pairs_per_s")
        if mine["failed"] or base["failed"]:
            rec.update({"measured": None, "met": None})
        else:
            rec.update({
                "memd_pairs_per_s": mine["pairs_per_s"], "base_pairs_per_s": base["pairs_per_s"],
                "memd_ns_per_pair": mine["ns_per_pair"], "base_ns_per_pair": base["ns_per_pair"],
                "memd_overlap": mine["overlap"], "memd_balance": mine["balance"],
                "measured": paired(mine, base, "pairs_per_s"),
                # Peer: how much less one memd process pays per pair. Scaling: N/1 ns/pair (1 is perfect).
                "ns_ratio": (paired(base, mine, "ns_per_pair") if t.peer else paired(mine, base, "ns_per_pair")),
            })
            rec["met"] = rec["measured"] is not None and rec["measured"] >= t.minimum
        out.append(rec)
    return out


def evaluate_controls(doc):
    """What N processes get out of this machine without sharing a heap (window mode)."""
    cells = doc["workloads"].get("shared_small", {}).get("cells", {})
    out = []
    for c in cells.values():
        if not c["control"] or c["procs"] == 1:
            continue
        base_name = "memd-shm" if c["allocator"] == "memd-shm-separate" else c["allocator"]
        base = cells.get(f"shared_small/{base_name}/1/{WINDOW}")
        rec = {"control": c["allocator"], "procs": c["procs"], "baseline": f"{base_name}, 1 process"}
        if c["failed"] or base is None or base["failed"]:
            rec["ratio"] = None
        else:
            rec.update({"pairs_per_s": c["pairs_per_s"], "base_pairs_per_s": base["pairs_per_s"],
                        "ratio": paired(c, base, "pairs_per_s"),
                        "ratio_min": min(paired_rounds(c, base, "pairs_per_s"), default=None),
                        "ratio_max": max(paired_rounds(c, base, "pairs_per_s"), default=None),
                        "ns_ratio": paired(c, base, "ns_per_pair"),
                        "balance": c["balance"], "overlap": c["overlap"]})
            # The same N processes on one shared heap, over N separate heaps: both run
            # concurrently in one window, so this does not lean on the 1-process case.
            shared = cells.get(f"shared_small/{base_name}/{c['procs']}/{WINDOW}")
            if c["separate"] and shared and not shared["failed"]:
                rec.update({"shared": f"{base_name}, {c['procs']} processes on one heap",
                            "shared_pairs_per_s": shared["pairs_per_s"],
                            "shared_ratio": paired(shared, c, "pairs_per_s")})
        out.append(rec)
    return out


# --- Markdown ---------------------------------------------------------------

def _times(r):
    """A ratio, readable from 0.001x to 10000x."""
    if r is None:
        return "—"
    return f"{r:,.0f}×" if r >= 100 else f"{r:.2f}×" if r >= 0.1 else f"{r:.2g}×"


def _mode_label(mode, window_s):
    return f"{window_s:g} s window" if mode == WINDOW else "fixed pairs"


def _header(doc):
    s = doc["settings"]
    lines = report.title_and_machine(doc, "memd shared and persistent heap benchmarks", "Packages")
    lines += [
        f"- memd tree: {doc['memd_revision']}" + (
            "; uncommitted changes outside bench/ when the run started (built into the binary as they were at "
            "build time): " + ", ".join(f"`{p}`" for p in doc["uncommitted_outside_bench"])
            if doc.get("uncommitted_outside_bench") else ""),
        f"- Settings: rounds={s['rounds']}, window={s['window_s']:g} s, scale={s['scale']:g} (fixed-pairs mode)",
        f"- Load average (1, 5, 15 min) before the run: {doc['load_average']['before']}; after: "
        f"{doc['load_average']['after']}",
    ]
    for what, fs in doc["file_systems"].items():
        lines.append(f"- File system of {what} (`{fs['path']}`): `stat -f -c %T` says {fs['stat_f_type']}; "
                     f"mounted as {fs['mount']}")
    if s["inherited_env"]:
        lines.append("- Inherited from the environment: " + ", ".join(f"`{k}`" for k in s["inherited_env"]))
    lines += [f"- **Skipped {a}**: {why}" for a, why in s["skipped"].items()]
    lines += ["", "## Method", "", doc["method"], "",
              "In every table: **ns/pair** is what one process pays per alloc+free pair (its loop time / its pairs, "
              "the mean over processes), median of the rounds; **±** is half the min–max range over the rounds; "
              "**pairs/s** is the total throughput of all processes in the table's mode; **overlap** is the share of "
              "the span from the first start to the last end in which every process was running; **balance** is "
              "the slowest process's own rate over the fastest's (1.00 with one process); **× X** is ns/pair over "
              "X's ns/pair in the same case, taken within each round, median over the rounds (below 1: faster "
              "than X). Every ratio in this report is so paired: both sides ran in the same round.", ""]
    return lines


def _case_table(cells, wname, mode):
    lines = []
    for procs in sorted({c["procs"] for c in cells}):
        mine = [c for c in cells if c["procs"] == procs]
        peers = [c for c in mine if c["peer"] and not c["failed"]]
        headers = ["allocator", "durability", "pairs/proc", "ns/pair", "±", "pairs/s", "overlap", "balance"]
        headers += [f"× {p['allocator']}" for p in peers]
        rows = []
        for c in mine:
            if c["failed"]:
                rows.append([c["allocator"], c["durability"], "", f"**FAIL** ({c['error']})"]
                            + [""] * (len(headers) - 4))
                continue
            spread = ratio((c["ns_max"] - c["ns_min"]) / 2, c["ns_per_pair"])
            done = f"{c['pairs_done_per_proc']:,.0f}" + (" (capped)" if c["capped_rounds"] else "")
            rows.append([c["allocator"], c["durability"], done, f"{c['ns_per_pair']:,.0f}",
                         fmt(None if spread is None else spread * 100, 0, "%"), f"{c['pairs_per_s']:,.0f}",
                         fmt(c["overlap"]), fmt(c["balance"])]
                        + [_times(paired(c, p, "ns_per_pair")) for p in peers])
        if wname == "shared_small":
            lines += [f"#### {procs} process{'es' if procs > 1 else ''}", ""]
        lines += report._table(headers, rows, ["---", "---"] + ["---:"] * (len(headers) - 2)) + [""]
    return lines


def _case_tables(doc):
    lines = []
    window_s = doc["settings"]["window_s"]
    for wname, w in doc["workloads"].items():
        lines += [f"## {wname}", "", w["summary"] + ".", ""]
        for mode in (WINDOW, PAIRS):
            cells = [c for c in w["cells"].values() if c["mode"] == mode and not c["control"]]
            if not cells:
                continue
            if mode == WINDOW:
                lines += [f"### Fixed window ({window_s:g} s) — the measure of throughput", "",
                          "pairs/s = the sum over processes of (pairs_i / elapsed_i), every process running for the "
                          "whole window; pairs/proc is the median number of pairs one process did in it.", ""]
            else:
                lines += ["### Fixed pairs — secondary (per-pair cost over a fixed sequence, checksums)", "",
                          "Every process runs the same number of pairs; pairs/s = all pairs / (last end − first "
                          "start), so with several processes it also counts the time one runs alone after the "
                          "others have finished (overlap below 1). Not used for the targets.", ""]
            lines += _case_table(cells, wname, mode)
            lines += _scaling(cells, mode, window_s)
    return lines


def _scaling(cells, mode, window_s):
    """Throughput with N processes over throughput with 1, per allocator."""
    cells = [c for c in cells if not c["failed"]]
    counts = sorted({c["procs"] for c in cells})
    if len(counts) < 2 or counts[0] != 1:
        return []
    rows = []
    for a in dict.fromkeys(c["allocator"] for c in cells):
        one = next((c for c in cells if c["allocator"] == a and c["procs"] == 1), None)
        for n in counts[1:]:
            many = next((c for c in cells if c["allocator"] == a and c["procs"] == n), None)
            if one and many:
                rows.append([a, f"{n} vs 1", f"{one['pairs_per_s']:,.0f}", f"{many['pairs_per_s']:,.0f}",
                             fmt(paired(many, one, "pairs_per_s"), suffix="×"),
                             fmt(paired(many, one, "ns_per_pair"), suffix="×"),
                             fmt(many["overlap"]), fmt(many["balance"])])
    if not rows:
        return []
    headers = ["allocator", "processes", "pairs/s, 1 process", "pairs/s, N processes", "throughput N / 1",
               "ns/pair N / 1", "overlap, N", "balance, N"]
    title = (f"#### Scaling ({window_s:g} s window): N processes on one heap against one" if mode == WINDOW
             else "#### Scaling (fixed pairs, secondary): N processes on one heap against one")
    return [title, "",
            "Perfect scaling on an idle machine with at least N free cores is a throughput ratio of N and an "
            "ns/pair ratio of 1; see the controls for what this machine gives.", ""] + report._table(
        headers, rows, ["---", "---"] + ["---:"] * 6) + [""]


def _targets(doc):
    targets = doc.get("targets") or []
    if not targets:
        return []
    window_s = doc["settings"]["window_s"]
    lines = ["## memd against its targets", "",
             "Every target is judged on total throughput (**pairs/s** of all processes) in the mode the **measure** "
             "column names: memd's over the peer's in the same case, or memd with 2 processes over memd with 1. "
             f"A **{window_s:g} s window** means: sum over processes of (pairs_i / elapsed_i), all running through "
             "the same window (see Method). **ns/pair ratio**: for a peer, the peer's ns/pair over memd's (how much "
             "less one memd process pays per pair while the others run too); for scaling, ns/pair with 2 processes "
             "over 1 (1.00× is perfect). **fixed-pairs ratio** is the same throughput ratio from the secondary "
             "fixed-pairs runs, shown for comparison and not judged. Medians of the rounds, from the tables below.",
             ""]
    rows = []
    for t in targets:
        measure = _mode_label(t["measure"], t.get("window_s") or window_s) + (
            ", Σ pairs_i/elapsed_i" if t["measure"] == WINDOW else ", all pairs / span")
        secondary = _times(t.get("secondary_ratio")) if t.get("secondary_measure") == PAIRS else "—"
        if t["measured"] is None:
            rows.append([t["goal"], t["memd"], t["against"], measure, "", "", "**FAIL**", "", "", "", secondary,
                         "not measured"])
            continue
        rows.append([t["goal"], t["memd"] + (f", {t['procs']} processes" if t["procs"] > 1 else ""), t["against"],
                     measure, f"{t['memd_pairs_per_s']:,.0f}", f"{t['base_pairs_per_s']:,.0f}",
                     _times(t["measured"]), _times(t["ns_ratio"]), fmt(t["memd_overlap"]), fmt(t["memd_balance"]),
                     secondary, ("**met**" if t["met"] else "**not met**")
                     + f" ({t.get('shown_minimum') or '≥ %g×' % t['minimum']})"])
    headers = ["target", "memd", "against", "measure", "memd pairs/s", "against pairs/s", "throughput ratio",
               "ns/pair ratio", "memd overlap", "memd balance", "fixed-pairs ratio (not judged)", "result"]
    lines += report._table(headers, rows, ["---", "---", "---", "---"] + ["---:"] * 7 + ["---"]) + [""]
    lines += ["What each side makes durable on the timed path — the persistent comparison is not like for like:", "",
              "- **memd-file** persists nothing per alloc or free. Its region is a `MAP_SHARED` file mapping, so "
              "what the loop wrote survives a crash of the process (the page cache holds it; the next "
              "`Region::open` recovers the metadata), as with **boost-file**, but not a power loss or kernel crash "
              "unless the program calls `Region::persist`/`checkpoint`; the benchmark does not. The region is "
              "msynced once when it is closed, after the clock stops.",
              "- **memd-pmem** is the same through libpmem's mapping (msync, or cache flushes on DAX), again only "
              "at close.",
              "- **pmemobj-atomic / pmemobj-tx** make the allocator's metadata and the ring slot durable before "
              "every call returns (here with cache flushes, `PMEM_IS_PMEM_FORCE=1`, which on this non-DAX file "
              "system is *not* actually durable: it measures the cost pmemobj would pay on real persistent memory). "
              "The **-msync** variants are durable on this disk: an msync per persist. In the fixed-pairs mode they "
              "run 100× fewer pairs with a 5 s cap; in the window mode the window is their cap.",
              "- **boost-shm / memd-shm / memd-daemon** live in tmpfs: nothing survives a reboot.", ""]
    return lines


def _controls(doc):
    controls = doc.get("controls") or []
    if not controls:
        return []
    window_s = doc["settings"]["window_s"]
    what = {
        "none-private": "the same loop and driver with no allocator (a fixed buffer per slot in each process's "
                        "private memory): N forked workers of one run, nothing shared",
        "memd-shm-separate": "N independent runs of memd-shm with 1 process each, every one on its own region "
                             "with its own owner, released at the same instant for the same window",
    }
    lines = ["## Controls: what several processes get from this machine", "",
             f"The same {window_s:g} s window, with nothing shared between the processes, so any shortfall from "
             "N× is the machine's (CPUs, hypervisor, memory bandwidth), not an allocator's. The baseline is the "
             "1-process window case of the same loop, in the same round; the range is the lowest and highest of "
             "those per-round ratios.", ""]
    rows = []
    for c in controls:
        if c["ratio"] is None:
            rows.append([c["control"], what.get(c["control"], ""), c["baseline"], "", "", "**FAIL**", "", "", ""])
            continue
        rows.append([c["control"], what.get(c["control"], ""), c["baseline"], f"{c['base_pairs_per_s']:,.0f}",
                     f"{c['pairs_per_s']:,.0f}",
                     f"{_times(c['ratio'])} ({_times(c['ratio_min'])}–{_times(c['ratio_max'])})",
                     _times(c["ns_ratio"]), fmt(c["overlap"]), fmt(c["balance"])])
    headers = ["control", "what runs", "baseline", "pairs/s, 1 process", "pairs/s, N processes",
               "throughput N / 1 (range)", "ns/pair N / 1", "overlap", "balance"]
    lines += report._table(headers, rows, ["---", "---", "---"] + ["---:"] * 6) + [""]
    # In words, from the numbers above and the scaling table.
    said = []
    for c in controls:
        if c["ratio"] is not None:
            said.append(f"{c['control']} gives {_times(c['ratio'])} with {c['procs']} processes "
                        f"(rounds {_times(c['ratio_min'])}–{_times(c['ratio_max'])})")
    for c in controls:
        if c.get("shared_ratio") is not None:
            said.append(f"{c['shared']} reach {c['shared_pairs_per_s']:,.0f} pairs/s, {_times(c['shared_ratio'])} "
                        f"of the {c['pairs_per_s']:,.0f} pairs/s of {c['procs']} separate regions running at the "
                        "same time (a comparison of two concurrent cases that does not lean on the 1-process one)")
    if said:
        lines += ["Here: " + "; ".join(said) + ". A 1-process window varies a lot from round to round on this "
                  "machine (see ± in the tables below), so the N / 1 ratios carry that noise.", ""]
    return lines


def render(doc):
    lines = _header(doc) + _targets(doc) + _controls(doc) + _case_tables(doc)
    lines += ["## Checks", ""]
    problems = [p for p in doc["problems"] if "CHECKSUM" in p or "checksum" in p]
    lines += [f"**{p}**" for p in problems] or [
        "Checksums (fixed-pairs mode; a window run's pairs depend on the speed) are identical for every allocator "
        "with the same process count and pairs. In every run the workers opened the heap the parent created (a "
        "token stored in it), and where the family can tell (`shared_check`), the parent saw the objects the "
        "workers left live in its own view of the heap."]
    return "\n".join(lines) + "\n"


def main():
    args = parse_args()
    bin_dir = os.path.join(os.path.abspath(args.build), "bench")
    binary, launcher = os.path.join(bin_dir, "shared", PROGRAM), os.path.join(bin_dir, "bench_launch")
    for path in (binary, launcher):
        if not os.path.isfile(path):
            sys.exit(f"run_shared: {path} not found — build the {PROGRAM} and bench_launch targets first")
    work_dir = os.path.abspath(args.dir or os.path.join(bin_dir, "shared-tmp"))
    os.makedirs(work_dir, exist_ok=True)

    by_workload, skipped = plan(args, compiled_in(binary))
    for name, why in skipped.items():
        log(f"run_shared: skipping {name}: {why}")
    if not by_workload:
        sys.exit("run_shared: nothing to run (check --only and --allocators)")

    shm_before = shm_objects()
    load_before = load_average()
    runs = []
    for wi, (wname, cases) in enumerate(by_workload.items(), 1):
        for rnd in range(args.rounds):
            shift = rnd % len(cases)
            for c in cases[shift:] + cases[:shift]:
                rec = run_case(args, c, binary, launcher, work_dir, shm_before)
                rec["round"] = rnd + 1
                runs.append(rec)
                status = (f"{float(rec['values']['ns_per_pair']):.0f} ns/pair, "
                          f"{float(rec['values']['pairs_per_s']):,.0f} pairs/s, {rec['wall_s']:.1f} s" if rec["ok"]
                          else f"FAILED: {rec['error']}")
                log(f"[{wi}/{len(by_workload)}] {wname} round {rnd + 1}/{args.rounds} "
                    f"{c.allocator.name:20s} procs={c.procs} {c.mode:6s} {status}")
                if not rec["ok"] and rec["stderr_tail"]:
                    log("    " + rec["stderr_tail"].strip().replace("\n", "\n    "))

    doc = build_document(args, by_workload, skipped, runs, work_dir, load_before)
    return publish_report(doc, render, args.out, "shared", not args.no_write, "run_shared")


if __name__ == "__main__":
    sys.exit(main())
