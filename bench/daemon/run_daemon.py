#!/usr/bin/env python3
"""Benchmarks of memd, the daemon: lease RPC latency under concurrent client
processes, allocations per lease RPC in steady state, and shared-heap
throughput through the daemon against the daemonless library and
Boost.Interprocess. Writes bench/results/daemon-<date>.md and .json.

It builds nothing: build the release tree first (the targets
bench_lease_latency, bench_lease_batching, bench_shared_heap, bench_launch
and memd_daemon_main). It starts one memd for the whole run (a temporary
socket and data directory, a shm namespace of its own, memd's default
settings otherwise), and stops it at the end.

Rounds are interleaved as in run_all.py and run_shared.py: each round runs
every case once, in an order rotated from round to round, so that machine
noise lands on all cases alike; the report gives medians over the rounds.

    python3 bench/daemon/run_daemon.py --build build/release
    python3 bench/daemon/run_daemon.py --build build/release --rounds 1 --no-write
"""
import argparse
import datetime
import glob
import os
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

DAEMON_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
BENCH_DIR = os.path.dirname(DAEMON_BENCH_DIR)
REPO_DIR = os.path.dirname(BENCH_DIR)
sys.path.insert(0, BENCH_DIR)
sys.path.insert(0, os.path.join(BENCH_DIR, "shared"))
sys.path.insert(0, DAEMON_BENCH_DIR)

from harness.result_files import publish_report, rerender_report  # noqa: E402
from harness import launch, machine  # noqa: E402
from harness.stats import median, ratio  # noqa: E402
import run_shared  # noqa: E402
from daemon_report import render  # noqa: E402

PACKAGES = ["libgrpc++1.51", "libprotobuf32", "libabsl20220623", "libboost1.74-dev", "libc6"]
CLIENT_COUNTS = (1, 2, 4, 8, 16, 32, 64)
LATENCY_REGION = "lease-latency"
ALLOCS_PER_CALL_TARGET = 100_000  # "below one RPC per 100,000 small allocations"
WITHIN = 1.1                      # memd-daemon within 1.1x of memd-shm (throughput)
SHARED_ALLOCATORS = ("boost-shm", "memd-shm", "memd-daemon")
SHARED_PROCS = (1, 2)


@dataclass(frozen=True)
class Churn:
    """A bench_lease_batching workload."""
    name: str
    min_size: int
    max_size: int
    live: int
    pairs: int
    warmup: int
    judged: bool  # the target is stated for this one (small objects)

    def scaled(self, scale):
        # (measured pairs, warm-up pairs) under --scale
        return max(1, round(self.pairs * scale)), max(1, round(self.warmup * scale))

    def summary(self, scale):
        pairs, warmup = self.scaled(scale)
        return (f"{self.min_size}–{self.max_size} B (uniform), {self.live:,} live objects, one thread, "
                f"{pairs:,} measured alloc+free pairs after {warmup:,} of warm-up")


CHURNS = [
    Churn("small", 16, 512, 4096, 10_000_000, 1_000_000, True),
    Churn("1-32KiB", 1024, 32768, 4096, 10_000_000, 1_000_000, False),
]


def log(message):
    print(message, file=sys.stderr, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build/release", help="CMake build directory (default: build/release)")
    p.add_argument("--rounds", type=int, default=5, help="runs per case; the median is reported (default 5)")
    p.add_argument("--lease-seconds", type=float, default=2.0,
                   help="window of each lease-latency run, in seconds (default 2)")
    p.add_argument("--seconds", type=float, default=1.0,
                   help="window of each shared-heap run, in seconds (default 1, as run_shared.py)")
    p.add_argument("--shared-repeats", type=int, default=3,
                   help="runs of each shared-heap case per round (default 3): one window varies a lot on a "
                        "small machine, so these get more samples than the others")
    p.add_argument("--scale", type=float, default=1.0, help="multiplies the pairs of the batching workloads")
    p.add_argument("--timeout", type=float, default=300, help="seconds before a single run is killed")
    p.add_argument("--out", default=os.path.join(BENCH_DIR, "results"), help="directory for the report files")
    p.add_argument("--no-write", action="store_true", help="print the report only, write no files")
    p.add_argument("--render", metavar="JSON", default="",
                   help="runs nothing: writes the Markdown report again from a saved JSON report (beside it)")
    args = p.parse_args()
    if args.rounds < 1 or args.shared_repeats < 1 or args.lease_seconds <= 0 or args.seconds <= 0 or args.scale <= 0:
        p.error("--rounds, --shared-repeats, --lease-seconds, --seconds and --scale must be positive")
    return args


# --- what else ran ----------------------------------------------------------

class CpuAccount:
    """CPU time the whole machine spent busy during the run, against what
    this run's own processes (the benchmarks and memd, all waited for) used:
    the difference is other people's work on the machine, the main source of
    noise on a shared box. Steal is time the hypervisor gave to other guests."""

    def __init__(self):
        self.start = self._sample()

    @staticmethod
    def _sample():
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
        tick = os.sysconf("SC_CLK_TCK")
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        return {"busy_s": (user + nice + system + irq + softirq) / tick, "steal_s": steal / tick,
                "own_s": ru.ru_utime + ru.ru_stime, "wall_s": time.monotonic()}

    def summary(self):
        end = self._sample()
        d = {k: end[k] - self.start[k] for k in end}
        capacity = d["wall_s"] * (os.cpu_count() or 1)
        other = max(0.0, d["busy_s"] - d["own_s"])
        return {"wall_s": d["wall_s"], "cpu_capacity_s": capacity, "busy_s": d["busy_s"], "own_s": d["own_s"],
                "other_s": other, "other_share": other / capacity if capacity else None, "steal_s": d["steal_s"]}


# --- the daemon -------------------------------------------------------------

class Memd:
    """One memd for the whole run: a temporary directory (short, for the
    socket path's limit), its own shm namespace, otherwise memd's defaults."""

    def __init__(self, binary):
        self.dir = tempfile.mkdtemp(prefix="memd-daemon-bench-")
        # Not "memd-bench-…": run_shared.py sweeps shm objects of that prefix
        # after every shared-heap run, and this daemon's must survive them.
        self.namespace = f"memdbench{os.getpid()}"
        self.socket = os.path.join(self.dir, "memd.sock")
        self.log_path = os.path.join(self.dir, "memd.log")
        self.argv = [binary, "--socket", self.socket, "--data-dir", os.path.join(self.dir, "data"),
                     "--shm-namespace", self.namespace]
        self.proc = None

    def start(self):
        with open(self.log_path, "ab") as logf:
            env = {k: v for k, v in os.environ.items() if not k.startswith("MEMD_")}
            self.proc = subprocess.Popen(self.argv, stdout=logf, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"memd exited at start with status {self.proc.returncode}: {self.log_tail()}")
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.connect(self.socket)
                return
            except OSError:
                time.sleep(0.01)
        raise RuntimeError("memd did not open its socket within 10 s: " + self.log_tail())

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        """SIGTERM (a clean shutdown); SIGKILL if it does not end in 10 s.
        Returns its exit status."""
        status = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            status = self.proc.returncode
        for path in glob.glob(f"/dev/shm/memd.{self.namespace}.*"):
            os.unlink(path)
        return status

    def remove_dir(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, n=2000):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def described(self):
        """The daemon's command line as the report shows it (no temporary paths)."""
        shown = ["memd", "--socket", "<tmp>/memd.sock", "--data-dir", "<tmp>/data", "--shm-namespace",
                 "memdbench<pid>"]
        return " ".join(shown)


# --- cases ------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    part: str      # "latency", "batching" or "shared"
    key: str
    detail: object  # (call, clients) | Churn | run_shared.Case


def plan_cases(args, available):
    cases = [Case("latency", f"latency/lease/{n}", ("lease", n)) for n in CLIENT_COUNTS]
    cases.append(Case("latency", "latency/stats/1", ("stats", 1)))
    cases += [Case("batching", f"batching/{c.name}", c) for c in CHURNS]
    shared_args = argparse.Namespace(allocators=list(SHARED_ALLOCATORS), only=["shared_small"],
                                     procs=list(SHARED_PROCS), scale=1.0)
    by_workload, skipped = run_shared.plan(shared_args, available)
    # The window mode is the measure of throughput (the fixed-pairs mode is not needed here).
    shared = [c for c in by_workload.get("shared_small", []) if c.mode == run_shared.WINDOW]
    for _ in range(args.shared_repeats):  # copies one after the other, so they spread over the round
        cases += [Case("shared", f"shared/{c.allocator.name}/{c.procs}", c) for c in shared]
    return cases, skipped


def run_latency(args, tools, memd, call, clients):
    argv = [tools["latency"], "--socket", memd.socket, "--clients", str(clients), "--seconds",
            f"{args.lease_seconds:g}", "--call", call, "--region", LATENCY_REGION]
    r = launch.run(tools["launcher"], argv, None, args.timeout)
    return {"ok": r.ok and "all_p50_us" in r.values, "error": r.error or ("no output" if r.ok else None),
            "wall_s": r.wall_s, "utime_s": r.utime_s, "stime_s": r.stime_s, "values": r.values,
            "stderr_tail": r.stderr_tail}


def run_batching(args, tools, memd, churn):
    pairs, warmup = churn.scaled(args.scale)
    argv = [tools["batching"], "--socket", memd.socket, "--min-size", str(churn.min_size), "--max-size",
            str(churn.max_size), "--live", str(churn.live), "--pairs", str(pairs), "--warmup", str(warmup)]
    r = launch.run(tools["launcher"], argv, None, args.timeout)
    ok = r.ok and "allocs_per_call" in r.values
    return {"ok": ok, "error": r.error or (None if ok else "no output"), "wall_s": r.wall_s,
            "utime_s": r.utime_s, "stime_s": r.stime_s, "values": r.values, "stderr_tail": r.stderr_tail}


def run_one(args, tools, memd, case, shared_env):
    if case.part == "latency":
        return run_latency(args, tools, memd, *case.detail)
    if case.part == "batching":
        return run_batching(args, tools, memd, case.detail)
    work_dir, shm_before = shared_env
    return run_shared.run_case(args, case.detail, tools["shared"], tools["launcher"], work_dir, shm_before)


# --- summaries --------------------------------------------------------------

LATENCY_KEYS = ("calls_per_s", "all_over_1ms", "all_over_50ms", "client_calls_min", "client_calls_max")
LATENCY_STATS = ("p50_us", "p99_us", "p999_us", "mean_us", "max_us", "samples")


def summarise_latency(recs, call):
    if not recs or any(not r["ok"] for r in recs):
        bad = [r for r in recs if not r["ok"]]
        return {"failed": True, "error": bad[0]["error"] if bad else "not run", "rounds": len(recs)}
    num = lambda k: [float(r["values"][k]) for r in recs]
    out = {"failed": False, "rounds": len(recs)}
    for k in LATENCY_KEYS:
        out[k] = median(num(k))
    kinds = ("stats",) if call == "stats" else ("lease", "release", "all")
    for kind in kinds + (("all",) if call == "stats" else ()):
        for stat in LATENCY_STATS:
            vals = num(f"{kind}_{stat}")
            out[f"{kind}_{stat}"] = median(vals)
            if stat == "p50_us":
                out[f"{kind}_p50_min"], out[f"{kind}_p50_max"] = min(vals), max(vals)
    out["over_50ms_total"] = sum(int(r["values"]["all_over_50ms"]) for r in recs)
    out["samples_total"] = sum(int(r["values"]["all_samples"]) for r in recs)
    return out


def summarise_batching(recs):
    if not recs or any(not r["ok"] for r in recs):
        bad = [r for r in recs if not r["ok"]]
        return {"failed": True, "error": bad[0]["error"] if bad else "not run", "rounds": len(recs)}
    num = lambda k: [float(r["values"][k]) for r in recs]
    calls = num("steady_calls")
    allocs = num("allocs")
    # A run with no call at all bought every allocation it made: a lower bound.
    per_call = [a / c if c else None for a, c in zip(allocs, calls)]
    out = {"failed": False, "rounds": len(recs), "allocs": median(allocs), "steady_calls": median(calls),
           "steady_calls_min": min(calls), "steady_calls_max": max(calls),
           "steady_lease_calls": median(num("steady_lease_calls")),
           "steady_other_calls": median(num("steady_other_calls")),
           "fill_calls": median(num("fill_calls")), "warmup_calls": median(num("warmup_calls")),
           "blocks_held": median(num("blocks_held")), "ns_per_pair": median(num("ns_per_pair")),
           "daemon_agrees": all(r["values"]["steady_calls"] == r["values"]["daemon_steady_calls"] for r in recs),
           "rounds_without_calls": sum(1 for c in calls if c == 0)}
    # Allocations per call over all rounds pooled (total allocations / total calls).
    out["allocs_per_call"] = sum(allocs) / sum(calls) if sum(calls) else None
    out["allocs_per_call_rounds"] = per_call
    return out


def summarise_shared(recs):
    cell = run_shared.summarise(recs)
    if not cell["failed"]:
        rates = [float(r["values"]["pairs_per_s"]) for r in recs]
        cell["pairs_per_s_mean"] = sum(rates) / len(rates)
        calls = [int(r["values"].get("remote_calls", "-1")) for r in recs]
        cell["remote_calls"] = median(calls) if all(c >= 0 for c in calls) else None
        cell["remote_calls_max"] = max(calls) if all(c >= 0 for c in calls) else None
    return cell


def evaluate_targets(doc):
    out = []
    for c in CHURNS:
        s = doc["batching"].get(c.name)
        if s is None:
            continue
        rec = {"goal": ("below one lease RPC per 100,000 small allocations" if c.judged else
                        "the same bar for 1–32 KiB objects (no target is stated for them; shown for scale)"),
               "case": f"{c.name}: {s['summary']}", "judged": c.judged}
        if s["failed"]:
            rec.update({"met": None, "measured": None, "how": f"not measured: {s['error']}"})
        elif s["allocs_per_call"] is None:
            rec.update({"met": True, "measured": None,
                        "how": f"no lease RPC at all in {s['allocs'] * s['rounds']:,.0f} allocations over the rounds"})
        else:
            v = s["allocs_per_call"]
            met = v >= ALLOCS_PER_CALL_TARGET
            rec.update({"met": met, "measured": v,
                        "how": (f"{v:,.0f} allocations per RPC (all rounds pooled)" + ("" if met else
                                f": {ALLOCS_PER_CALL_TARGET / v:,.0f}× short of 100,000"))})
        out.append(rec)
    cells = doc["shared"]["cells"]
    for t in doc["shared"]["targets"]:
        mine = cells.get(f"shared_small/memd-daemon/{t['procs']}/window", {})
        base = cells.get(f"shared_small/memd-shm/{t['procs']}/window", {})
        mean_ratio = ratio(mine.get("pairs_per_s_mean"), base.get("pairs_per_s_mean"))
        rec = {"goal": f"shared heap through memd within {WITHIN:g}× of the daemonless library (memd-shm), "
                       f"{t['procs']} process{'es' if t['procs'] > 1 else ''}",
               "case": f"shared_small, {t['procs']} process{'es' if t['procs'] > 1 else ''}, "
                       f"{doc['settings']['shared_window_s']:g} s window", "judged": True}
        if t["measured"] is None:
            rec.update({"met": None, "measured": None, "how": "not measured (a case failed)"})
        else:
            slower = 1 / t["measured"] if t["measured"] else None
            rec.update({"met": t["met"], "measured": t["measured"],
                        "how": (f"memd-daemon {t['memd_pairs_per_s']:,.0f} pairs/s = {t['measured']:.2f}× memd-shm's "
                                f"{t['base_pairs_per_s']:,.0f} (medians of the runs)" +
                                (f", i.e. {slower:.2f}× slower" if slower and slower > 1 else ", i.e. not slower")
                                + ("" if t["met"] else f" (allowed: {WITHIN:g}×)")
                                + (f"; the means give {mean_ratio:.2f}×" if mean_ratio else ""))})
        out.append(rec)
    return out


# CMake targets of the programs measured (their build must be current).
TARGETS = ("bench_lease_latency", "bench_lease_batching", "bench_shared_heap", "bench_launch", "memd_daemon_main")


def build_is_current(build):
    """Whether the build directory's programs are what the source tree now
    holds: Ninja's dry run has nothing to do. None if that cannot be told."""
    if not os.path.isfile(os.path.join(build, "build.ninja")) or not shutil.which("ninja"):
        return None, "not a Ninja build directory: not checked"
    r = subprocess.run(["ninja", "-C", build, "-n", *TARGETS], capture_output=True, text=True)
    if r.returncode != 0:
        return None, "ninja -n failed: " + (r.stderr or r.stdout).strip()[-300:]
    if "no work to do" in r.stdout:
        return True, ""
    steps = [line for line in r.stdout.splitlines() if line.startswith("[")]
    if all("Re-running CMake" in line for line in steps):
        # A dry run stops there: what the new configuration would rebuild is unknown.
        return None, "a CMake file changed since the last configure, so ninja -n cannot tell"
    return False, f"{len(steps)} build step(s) pending, e.g. " + "; ".join(steps[:3])


def build_document(args, cases, skipped, runs, memd, load_before, memd_status, current):
    doc = {
        "command": "python3 " + " ".join(shlex.quote(a) for a in sys.argv),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": machine.describe(),
        "packages": machine.package_versions(PACKAGES),
        "memd_revision": machine.git_revision(REPO_DIR),
        "uncommitted_outside_bench": run_shared.uncommitted_outside_bench(),
        "load_average": {"before": load_before, "after": run_shared.load_average()},
        "settings": {"rounds": args.rounds, "shared_repeats": args.shared_repeats,
                     "allocs_per_call_target": ALLOCS_PER_CALL_TARGET, "shared_allocators": list(SHARED_ALLOCATORS),
                     "lease_window_s": args.lease_seconds, "shared_window_s": args.seconds,
                     "scale": args.scale, "build": args.build, "skipped": skipped,
                     "inherited_env": sorted(k for k in os.environ if k.startswith(("MEMD_", "GRPC_")))},
        "daemon": {"command": memd.described(), "exit_status": memd_status,
                   "shm": run_shared.file_system("/dev/shm")},
        "problems": [], "runs": runs,
    }
    (before, why_before), (after, why_after) = current
    doc["build_current"] = {"before": before, "after": after, "why": why_after or why_before}
    if before is False or after is False:
        doc["problems"].append("the build directory was not up to date with the source tree "
                               f"({'at the start' if before is False else 'at the end'} of the run: "
                               f"{why_before if before is False else why_after}): the figures are not of this tree")
    by_key = {}
    for r in runs:
        by_key.setdefault(r["case"], []).append(r)
    doc["latency"] = {}
    for c in cases:
        if c.part == "latency":
            call, n = c.detail
            doc["latency"][f"{call}/{n}"] = dict(summarise_latency(by_key.get(c.key, []), call), call=call, clients=n)
    doc["batching"] = {c.detail.name: dict(summarise_batching(by_key.get(c.key, [])),
                                           summary=c.detail.summary(args.scale),
                                           min_size=c.detail.min_size, max_size=c.detail.max_size)
                       for c in cases if c.part == "batching"}
    cells = {}
    for c in {c.key: c for c in cases if c.part == "shared"}.values():  # each case once (they repeat)
        cell = summarise_shared(by_key.get(c.key, []))
        cell.update({"allocator": c.detail.allocator.name, "procs": c.detail.procs, "mode": c.detail.mode,
                     "durability": c.detail.allocator.durability})
        cells[c.detail.key] = cell
    shared_targets = [t for t in run_shared.evaluate_targets({"workloads": {"shared_small": {"cells": cells}}})
                      if t["memd"] == "memd-daemon"]
    doc["shared"] = {"cells": cells, "targets": shared_targets}
    doc["targets"] = evaluate_targets(doc)
    for key, s in list(doc["latency"].items()) + list(doc["batching"].items()) + list(cells.items()):
        if s.get("failed"):
            doc["problems"].append(f"{key} failed: {s['error']}")
    for name, s in doc["batching"].items():
        if not s["failed"] and not s["daemon_agrees"]:
            doc["problems"].append(f"batching/{name}: the client's and the daemon's counts of lease calls differ")
    if memd_status not in (0, None):
        doc["problems"].append(f"memd exited with status {memd_status} at the end of the run")
    return doc


def status_line(case, rec):
    if not rec["ok"]:
        return f"FAILED: {rec['error']}"
    v = rec["values"]
    if case.part == "latency":
        kind = "stats" if case.detail[0] == "stats" else "lease"
        return (f"{float(v['calls_per_s']):,.0f} calls/s, {kind} p50 {float(v[kind + '_p50_us']):.0f} us, "
                f"p99 {float(v[kind + '_p99_us']):.0f} us, max {float(v['all_max_us']) / 1000:.0f} ms")
    if case.part == "batching":
        return (f"{v['steady_calls']} steady calls ({v['steady_lease_calls']} Lease), "
                f"{float(v['allocs_per_call']):,.0f} allocs/call, {float(v['ns_per_pair']):.0f} ns/pair")
    return (f"{float(v['pairs_per_s']):,.0f} pairs/s, {float(v['ns_per_pair']):.0f} ns/pair, "
            f"remote calls {v.get('remote_calls', '?')}")



def main():
    args = parse_args()
    if args.render:
        return rerender_report(args.render, render, not args.no_write, "run_daemon")
    build = os.path.abspath(args.build)
    tools = {"latency": os.path.join(build, "bench", "daemon", "bench_lease_latency"),
             "batching": os.path.join(build, "bench", "daemon", "bench_lease_batching"),
             "shared": os.path.join(build, "bench", "shared", "bench_shared_heap"),
             "launcher": os.path.join(build, "bench", "bench_launch"),
             "memd": os.path.join(build, "daemon", "memd")}
    for path in tools.values():
        if not os.path.isfile(path):
            sys.exit(f"run_daemon: {path} not found — build the release tree first (cmake --build {args.build})")
    work_dir = os.path.join(build, "bench", "daemon-tmp")
    os.makedirs(work_dir, exist_ok=True)
    cases, skipped = plan_cases(args, run_shared.compiled_in(tools["shared"]))
    for name, why in skipped.items():
        log(f"run_daemon: skipping {name}: {why}")

    # A build older than the tree measures other code than the report names.
    current_before = build_is_current(build)
    if current_before[0] is False:
        log(f"run_daemon: warning: {args.build} is not up to date ({current_before[1]}); the report will say so")
    memd = Memd(tools["memd"])
    # run_shared.run_case reads these: memd-daemon connects to this run's daemon.
    args.daemon_socket = memd.socket
    memd_status = None
    runs = []
    load_before = run_shared.load_average()
    cpu = CpuAccount()
    try:
        memd.start()
        log(f"run_daemon: memd up (pid {memd.proc.pid}), socket {memd.socket}")
        shm_before = run_shared.shm_objects()
        for rnd in range(args.rounds):
            shift = rnd % len(cases)
            for c in cases[shift:] + cases[:shift]:
                if not memd.alive():
                    raise RuntimeError("memd died during the run: " + memd.log_tail())
                rec = run_one(args, tools, memd, c, (work_dir, shm_before))
                rec.update({"case": c.key, "part": c.part, "round": rnd + 1})
                rec["stderr_tail"] = (rec.get("stderr_tail") or "").replace(REPO_DIR + os.sep, "")
                runs.append(rec)
                log(f"round {rnd + 1}/{args.rounds} {c.key:28s} {status_line(c, rec)}")
                if not rec["ok"] and rec["stderr_tail"]:
                    log("    " + rec["stderr_tail"].strip().replace("\n", "\n    "))
    finally:
        memd_status = memd.stop()
        if memd_status not in (0, None):
            log(f"run_daemon: memd exited with status {memd_status}; its log ends:\n{memd.log_tail()}")
        memd.remove_dir()

    doc = build_document(args, cases, skipped, runs, memd, load_before, memd_status,
                         (current_before, build_is_current(build)))
    doc["cpu"] = cpu.summary()
    return publish_report(doc, render, args.out, "daemon", not args.no_write, "run_daemon")


if __name__ == "__main__":
    sys.exit(main())
