#!/usr/bin/env python3
"""What telemetry costs the malloc/free fast path: the same programs under
memd's shim from before telemetry, with telemetry off, on at the default
sampling rate and on at one sample per 64 KiB, side by side in one run.
Writes bench/results/telemetry-<date>.md and .json.

The cases (every one the same benchmark binaries, allocator swapped in with
LD_PRELOAD by bench_launch, as in run_all.py):

  glibc               no preload: the usual baseline, for scale
  memd-pre-telemetry  the shim of the commit before telemetry (--pre-shim:
                      build it in a worktree of that commit, see below)
  memd                this tree's shim, no MEMD_TELEMETRY: the per-class
                      counters and the sampling countdown, no samples
  memd-telemetry      MEMD_TELEMETRY=1, default MEMD_SAMPLE_BYTES (512 KiB),
                      reporting to a real memd started here (MEMD_SOCKET)
  memd-sample-64k     the same with MEMD_SAMPLE_BYTES=65536

and the programs: bench_malloc_micro's small-object pairs and batches (and
4 KiB, on the large path; and pairs of 64 KiB and 1 MiB, huge runs) with one
thread, one process per case; the same loops with two threads at once, and
pairs of 64 KiB and 1 MiB that fill each object (micro_threads.cc, compiled
here with the release build's flags); a few workloads of bench/workloads; and /bin/true,
which shows the fixed start-up cost of each case (MEMD_TELEMETRY=1 loads
the daemon link and opens a session before main). Rounds are interleaved
as in run_all.py: each round runs every program under every case, the
cases of one program back to back, in an order rotated from round to
round; ratios are taken within each round, where the runs compared were
seconds apart, and their median over the rounds is reported.

    git worktree add ../memd-pre e1faefa
    (cd ../memd-pre && cmake --preset release && cmake --build --preset release --target memd-malloc)
    python3 bench/telemetry/run_telemetry.py --build build/release \\
        --pre-shim ../memd-pre/build/release/client/libmemd-malloc.so --wait-quiet 30
"""
import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

TELEMETRY_DIR = os.path.dirname(os.path.abspath(__file__))
BENCH_DIR = os.path.dirname(TELEMETRY_DIR)
REPO_DIR = os.path.dirname(BENCH_DIR)
sys.path.insert(0, BENCH_DIR)
sys.path.insert(0, os.path.join(BENCH_DIR, "daemon"))
sys.path.insert(0, TELEMETRY_DIR)

from harness import launch, machine, micro, summary  # noqa: E402
from harness.allocators import MEMD_SHIM, Allocator  # noqa: E402
from harness.result_files import publish_report, rerender_report  # noqa: E402
from harness.workloads import MICRO, WORKLOADS  # noqa: E402
from run_daemon import CpuAccount, Memd  # noqa: E402
from telemetry_report import render  # noqa: E402

CASES = ["glibc", "memd-pre-telemetry", "memd", "memd-telemetry", "memd-sample-64k"]
# What each telemetry case sets besides MEMD_SOCKET (the daemon's, known at run time).
TELEMETRY_ENV = {
    "memd-telemetry": {"MEMD_TELEMETRY": "1"},
    "memd-sample-64k": {"MEMD_TELEMETRY": "1", "MEMD_SAMPLE_BYTES": "65536"},
}
# One process per microbenchmark case and allocator, the cases of a round back
# to back: on a shared (virtual) machine the speed of a CPU drifts over
# seconds, so the runs compared with each other must be close in time.
MICRO_1T = [f"BM_{kind}/{size}" for kind in ("pair", "batch") for size in (16, 64, 256, 4096)]
MICRO_1T += [f"BM_pair/{size}" for size in (64 << 10, 1 << 20)]
MICRO_2T = [f"BM_{kind}/{size}/real_time/threads:2" for kind in ("pair", "batch") for size in (16, 64, 256)]
MICRO_FILL = [f"BM_fill/{size}" for size in (64 << 10, 1 << 20)]  # micro_threads.cc, one thread
HELPER_SOURCE = os.path.join(TELEMETRY_DIR, "micro_threads.cc")
DEFAULT_WORKLOADS = "threads_churn,symbolic,lifetime_mix"
# Processes whose presence means the machine is not quiet (someone is building).
BUSY_COMMANDS = {"cc1", "cc1plus", "ninja", "make", "ld", "ld.gold", "collect2", "as", "cmake", "ctest", "rustc",
                 "clang", "clang++", "go"}
TARGETS = ("bench_malloc_micro", "bench_launch", "memd-malloc", "memd-daemon-link", "memd_daemon_main")
PACKAGES = ["libc6", "libbenchmark1debian"]


def log(message):
    print(message, file=sys.stderr, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build/release", help="CMake build directory (default: build/release)")
    p.add_argument("--pre-shim", default="", help="libmemd-malloc.so built from the commit before telemetry")
    p.add_argument("--rounds", type=int, default=10, help="runs per program and case; medians reported (default 10)")
    p.add_argument("--min-time", type=float, default=0.7,
                   help="seconds per microbenchmark case (default 0.7: with Google Benchmark's calibration a "
                        "process then lives over a second, so a telemetry case sends at least one report)")
    p.add_argument("--workloads", default=DEFAULT_WORKLOADS,
                   help="comma list of bench/workloads programs, wl_ optional ('' for none; "
                        f"default {DEFAULT_WORKLOADS})")
    p.add_argument("--threads", type=int, default=2, help="threads of the multi-threaded workloads (default 2)")
    p.add_argument("--scale", type=float, default=2.0,
                   help="work multiplier of the workloads (default 2: seconds each, so that a case's fixed "
                        "start-up cost is a small part of the time)")
    p.add_argument("--target", type=float, default=0.03, help="allowed slowdown of telemetry on (default 0.03)")
    p.add_argument("--wait-quiet", type=float, default=0, metavar="MINUTES",
                   help="before measuring, wait up to this long for a quiet machine (1-min load under "
                        "--quiet-load, nobody compiling), re-checking every minute")
    p.add_argument("--quiet-load", type=float, default=0.7, help="the load average that counts as quiet (0.7)")
    p.add_argument("--timeout", type=float, default=300, help="seconds before a single run is killed")
    p.add_argument("--out", default=os.path.join(BENCH_DIR, "results"), help="directory for the report files")
    p.add_argument("--no-write", action="store_true", help="print the report only, write no files")
    p.add_argument("--render", metavar="JSON", default="",
                   help="runs nothing: writes the Markdown report again from a saved JSON report (beside it)")
    args = p.parse_args()
    if not args.render and not args.pre_shim:
        p.error("--pre-shim is required (the shim built from the commit before telemetry)")
    if args.rounds < 1 or args.min_time <= 0 or args.scale <= 0 or args.threads < 1:
        p.error("--rounds, --min-time, --scale and --threads must be positive")
    names = [n.strip() for n in args.workloads.split(",") if n.strip()]
    names = [n if n.startswith("wl_") else "wl_" + n for n in names]
    known = {w.name: w for w in WORKLOADS if w.name.startswith("wl_")}  # real programs run differently
    unknown = [n for n in names if n not in known]
    if unknown:
        p.error(f"unknown workload(s) {unknown}; choose from {sorted(known)}")
    args.workloads = [known[n] for n in names]
    return args


# --- the machine --------------------------------------------------------------

def busy_processes():
    """Compilers and build tools running now (not ours: we start none while measuring)."""
    out = subprocess.run(["ps", "-eo", "comm="], capture_output=True, text=True).stdout
    return sorted({c.strip() for c in out.splitlines() if c.strip() in BUSY_COMMANDS})


def machine_state():
    return {"load": list(os.getloadavg()), "busy": busy_processes(), "time": time.strftime("%H:%M:%S")}


def wait_until_quiet(minutes, max_load):
    """Returns the states seen, the last one when measuring starts."""
    seen = [machine_state()]
    deadline = time.monotonic() + minutes * 60
    while (seen[-1]["load"][0] >= max_load or seen[-1]["busy"]) and time.monotonic() < deadline:
        s = seen[-1]
        log(f"run_telemetry: machine busy (load {s['load'][0]:.2f}, running {', '.join(s['busy']) or 'nothing'}); "
            "checking again in 60 s")
        time.sleep(60)
        seen.append(machine_state())
    return seen


def build_is_current(build, targets):
    """True if Ninja's dry run of the targets has nothing to do; None if that cannot be told."""
    if not os.path.isfile(os.path.join(build, "build.ninja")) or not shutil.which("ninja"):
        return None
    r = subprocess.run(["ninja", "-C", build, "-n", *targets], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    return "no work to do" in r.stdout


def shown_path(path):
    """A path as a committed report may show it: relative to the source tree, else only its tail."""
    path = os.path.abspath(path)
    if path.startswith(REPO_DIR + os.sep):
        return os.path.relpath(path, REPO_DIR)
    return "<pre-telemetry tree>/" + os.path.join(*path.split(os.sep)[-4:])


# --- the programs -------------------------------------------------------------

def compile_helper(build, out_dir):
    """micro_threads.cc, with the flags the build gave bench_malloc_micro."""
    flags = ["-O2", "-g", "-DNDEBUG", "-fno-omit-frame-pointer", "-std=c++20"]
    compiler = "c++"
    try:
        with open(os.path.join(build, "compile_commands.json")) as f:
            for entry in json.load(f):
                if entry["file"].endswith("micro/bench_malloc_micro.cc"):
                    argv = shlex.split(entry["command"])
                    compiler = argv[0]
                    flags = [a for a in argv[1:] if a.startswith(("-O", "-g", "-D", "-f", "-std", "-m"))]
                    break
    except (OSError, ValueError, KeyError):
        pass
    binary = os.path.join(out_dir, "micro_threads")
    argv = [compiler, *flags, "-I", REPO_DIR, HELPER_SOURCE, "-o", binary, "-lbenchmark", "-lpthread"]
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        return None, "cannot compile micro_threads.cc: " + (r.stderr.strip().splitlines() or ["?"])[-1]
    return binary, " ".join([os.path.basename(compiler), *flags])


def metrics_address(memd, timeout=10):
    """Where the daemon serves /metrics, from its log. The daemon opens its
    socket before its metrics port, so the line may come after start() returns."""
    deadline = time.monotonic() + timeout
    while True:
        found = re.findall(r"metrics on (\S+)/metrics", memd.log_tail(100000))
        if found or time.monotonic() > deadline or not memd.alive():
            return found[0] if found else ""
        time.sleep(0.05)


def metrics(address):
    """The daemon's telemetry counters from /metrics."""
    wanted = ("memd_telemetry_reports_total", "memd_telemetry_samples_total", "memd_telemetry_rejected_total",
              "memd_sessions_opened_total")
    if not address:
        return {"error": "the daemon's log names no metrics address"}
    try:
        text = urllib.request.urlopen(f"http://{address}/metrics", timeout=5).read().decode()
    except OSError as e:
        return {"error": str(e)}
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in wanted:
            out[name] = float(value)
    return out


def run_program(args, prog, case, tools):
    """One program under one case: {key: seconds or ns per pair}, error, checksum."""
    if prog["kind"] == "micro":
        table, error = micro.run(tools["launcher"], prog["binary"], case, args.min_time, args.timeout, prog["filter"])
        return {f"{b}/{s}": ns for (b, s), ns in table.items()}, error, None
    r = launch.run(tools["launcher"], prog["argv"], case.preload, args.timeout, case.env)
    if prog["kind"] == "workload":
        rec = summary.validate({"ok": r.ok, "error": r.error, "values": r.values})
        if not rec["ok"]:
            return {}, rec["error"], None
        return {prog["name"]: r.wall_s}, None, r.values["checksum"]
    return ({prog["name"]: r.wall_s}, None, None) if r.ok else ({}, r.error, None)


def plan_programs(args, tools):
    progs = [{"name": "startup", "kind": "startup", "argv": ["/bin/true"], "label": "/bin/true (start-up and exit)"}]
    progs += [{"name": b, "kind": "micro", "binary": tools["micro"], "filter": f"^{b}$"} for b in MICRO_1T]
    if tools.get("micro_threads"):
        progs += [{"name": b, "kind": "micro", "binary": tools["micro_threads"], "filter": f"^{b}$"}
                  for b in MICRO_2T + MICRO_FILL]
    for w in args.workloads:
        progs.append({"name": w.name, "kind": "workload", "argv": w.argv(tools["bin_dir"], args.threads, args.scale),
                      "threads": args.threads if w.multi_threaded else 1, "summary": w.summary})
    return progs



def main():
    args = parse_args()
    if args.render:
        return rerender_report(args.render, render, not args.no_write, "run_telemetry")
    build = os.path.abspath(args.build)
    bin_dir = os.path.join(build, "bench")
    tools = {"bin_dir": bin_dir, "launcher": os.path.join(bin_dir, "bench_launch"),
             "micro": os.path.join(bin_dir, MICRO), "memd": os.path.join(build, "daemon", "memd"),
             "shim": os.path.join(build, MEMD_SHIM), "pre_shim": os.path.abspath(args.pre_shim)}
    for path in list(tools.values())[1:] + [os.path.join(bin_dir, w.name) for w in args.workloads]:
        if not os.path.isfile(path):
            sys.exit(f"run_telemetry: {path} not found — build it first")
    pre_dir = os.path.dirname(tools["pre_shim"])
    pre_build = os.path.dirname(pre_dir)
    problems = []
    facts = {"tree": machine.git_revision(REPO_DIR), "pre_tree": machine.git_revision(pre_dir),
             "build_current": build_is_current(build, TARGETS),
             "pre_build_current": build_is_current(pre_build, ["memd-malloc"])}
    if facts["pre_tree"] == "no commit":
        problems.append("--pre-shim is not inside a git tree: which commit it was built from is unknown")
    for key, what in (("build_current", args.build), ("pre_build_current", "the pre-telemetry build")):
        if facts[key] is False:
            problems.append(f"{what} is not up to date with its source tree (ninja -n has work to do)")

    work = tempfile.mkdtemp(prefix="memd-bench-telemetry-")
    try:
        tools["micro_threads"], helper_note = compile_helper(build, work)
        if tools["micro_threads"] is None:
            problems.append(helper_note)
        quiet = wait_until_quiet(args.wait_quiet, args.quiet_load)
        doc = measure(args, tools, problems, facts, quiet, helper_note)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return publish_report(doc, render, args.out, "telemetry", not args.no_write, "run_telemetry")


def measure(args, tools, problems, facts, quiet, helper_note):
    memd = Memd(tools["memd"])
    # Port 0: never the port of a memd someone else runs (9464 by default).
    memd.argv += ["--metrics-address", "127.0.0.1:0"]
    cases = [Allocator("glibc", None), Allocator("memd-pre-telemetry", tools["pre_shim"]),
             Allocator("memd", tools["shim"])]
    cases += [Allocator(n, tools["shim"], {**env, "MEMD_SOCKET": memd.socket}) for n, env in TELEMETRY_ENV.items()]
    progs = plan_programs(args, tools)
    values = {}     # key -> case -> [value per round]
    checksums = {}  # workload -> case -> {checksums}
    errors = []
    cpu = CpuAccount()
    state_start = machine_state()
    started = datetime.datetime.now().astimezone()
    before = after = {}
    telemetry_runs = 0
    try:
        memd.start()
        address = metrics_address(memd)
        before = metrics(address)
        for rnd in range(args.rounds):
            shift = rnd % len(cases)
            for prog in progs:
                for case in cases[shift:] + cases[:shift]:
                    if not memd.alive():
                        raise RuntimeError("memd died during the run: " + memd.log_tail())
                    got, error, checksum = run_program(args, prog, case, tools)
                    telemetry_runs += case.name in TELEMETRY_ENV
                    if error:
                        errors.append(f"{prog['name']} under {case.name}, round {rnd + 1}: {error}")
                        log("    FAILED: " + errors[-1])
                    for key, v in got.items():  # None where a round failed: rounds stay paired
                        values.setdefault(key, {}).setdefault(case.name, [None] * args.rounds)[rnd] = v
                    if checksum is not None:
                        checksums.setdefault(prog["name"], {}).setdefault(case.name, set()).add(checksum)
            log(f"run_telemetry: round {rnd + 1}/{args.rounds} done (load {os.getloadavg()[0]:.2f})")
        time.sleep(1.5)  # the last reports (one a second) reach the daemon
        after = metrics(address)
    finally:
        memd_status = memd.stop()
        memd.remove_dir()
    state_end = machine_state()

    daemon = {k: after.get(k, 0) - before.get(k, 0) for k in after if k != "error"}
    daemon["error"] = after.get("error") or before.get("error")
    daemon["telemetry_processes"] = telemetry_runs
    problems += errors
    if memd_status not in (0, None):
        problems.append(f"memd exited with status {memd_status}")
    if daemon["error"]:
        problems.append(f"the daemon's /metrics could not be read: {daemon['error']}")
    else:
        if daemon.get("memd_sessions_opened_total", 0) < telemetry_runs:
            problems.append(f"{telemetry_runs} processes ran with MEMD_TELEMETRY=1 but the daemon saw "
                            f"{daemon.get('memd_sessions_opened_total', 0):.0f} sessions")
        if not daemon.get("memd_telemetry_samples_total"):
            problems.append("the daemon received no samples: sampling was not measured")
    for wname, by_case in checksums.items():
        differing = {c: sorted(s) for c, s in by_case.items()}
        if len({x for s in differing.values() for x in s}) > 1:
            problems.append(f"{wname}: checksums differ between cases or rounds: {differing}")

    return {
        "command": "python3 " + " ".join(shlex.quote(a) if a != args.pre_shim else shown_path(a)
                                         for a in sys.argv),
        "date": started.isoformat(timespec="seconds"),
        "machine": machine.describe(),
        "packages": machine.package_versions(PACKAGES),
        "memd_revision": facts["tree"],
        "pre_revision": facts["pre_tree"],
        "build_current": facts["build_current"],
        "pre_build_current": facts["pre_build_current"],
        "settings": {"rounds": args.rounds, "min_time_s": args.min_time, "threads": args.threads,
                     "scale": args.scale, "target": args.target, "build": args.build,
                     "pre_shim": shown_path(args.pre_shim), "helper_compiled_with": helper_note,
                     "cases": [c.name for c in cases],
                     "case_env": {c.name: {k: ("<tmp>/memd.sock" if k == "MEMD_SOCKET" else v)
                                           for k, v in c.env.items()} for c in cases if c.env},
                     "daemon": memd.described() + " --metrics-address 127.0.0.1:0",
                     "ignored_env": launch.inherited_settings()},
        "programs": [{k: v for k, v in p.items() if k not in ("binary", "argv")} |
                     ({"argv": [os.path.basename(p["argv"][0])] + p["argv"][1:]} if "argv" in p else {})
                     for p in progs],
        "quiet_wait": quiet,
        "state_start": state_start,
        "state_end": state_end,
        "cpu": cpu.summary(),
        "daemon_telemetry": daemon,
        "values": values,
        "problems": problems,
    }


if __name__ == "__main__":
    sys.exit(main())
