"""Runs one measured process through bench_launch and collects its numbers.

bench_launch (bench/launcher/) forks the program, sets LD_PRELOAD and the
allocator's environment variables for it alone and reports wait4() rusage;
see that file for why Python does not wait4() the workload itself (the
kernel would charge Python's own peak RSS to the child).
"""
import os
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field

_KEY_VALUE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(\S+)")
# What ld.so prints when LD_PRELOAD names something it cannot load; the
# program then silently runs on glibc, which would poison the comparison.
_PRELOAD_FAILED = "cannot be preloaded"
# memd's settings (see region/options.cc). Inherited ones are dropped so that
# `memd` always means the defaults and a variant differs by its own env only,
# whatever the shell running the harness has exported.
SETTINGS_PREFIX = "MEMD_"


def inherited_settings():
    """The memd settings in the harness's own environment, which runs ignore."""
    return sorted(k for k in os.environ if k.startswith(SETTINGS_PREFIX))


@dataclass
class RunResult:
    ok: bool
    error: str | None = None
    wall_s: float | None = None
    maxrss_kib: int | None = None
    minflt: int | None = None
    majflt: int | None = None
    utime_s: float | None = None
    stime_s: float | None = None
    values: dict = field(default_factory=dict)  # key=value lines from stdout
    stdout: str = ""
    stderr_tail: str = ""


def _parse_pairs(text):
    pairs = {}
    for line in text.splitlines():
        for key, value in _KEY_VALUE.findall(line):
            pairs[key] = value
    return pairs


class Launched:
    """A measured process under way (see start). Its stdout and stderr go to
    files, so a long-running server cannot block on a full pipe."""

    def __init__(self, proc, tmp, report_path, out, err):
        self.proc, self.tmp, self.report_path, self.out, self.err = proc, tmp, report_path, out, err


def start(launcher, argv, preload=None, env=None, cwd=None):
    """Starts `argv` under bench_launch and returns at once; finish() waits
    for it and collects its numbers. `env`: variables for the measured
    program only (passed to bench_launch as --env, so they reach neither the
    launcher nor this process)."""
    tmp = tempfile.mkdtemp(prefix="memd-bench-")
    report_path = os.path.join(tmp, "rusage")
    cmd = [launcher] + (["--preload", preload] if preload else [])
    cmd += [arg for k, v in sorted((env or {}).items()) for arg in ("--env", f"{k}={v}")]
    cmd += ["--report", report_path, "--"] + argv
    own_env = {k: v for k, v in os.environ.items() if not k.startswith(SETTINGS_PREFIX)}
    own_env.pop("LD_PRELOAD", None)  # only bench_launch decides what the child preloads
    out = open(os.path.join(tmp, "stdout"), "w+")
    err = open(os.path.join(tmp, "stderr"), "w+")
    # A new session lets a timeout kill the launcher and the workload together.
    proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, text=True, env=own_env,
                            cwd=cwd, start_new_session=True)
    return Launched(proc, tmp, report_path, out, err)


def _read(f):
    f.seek(0)
    return f.read()


def finish(launched, timeout=300):
    """Waits for a started process (killing it after `timeout` seconds) and
    returns its RunResult."""
    proc = launched.proc
    try:
        proc.wait(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        timed_out = True
    stdout, stderr = _read(launched.out), _read(launched.err)
    launched.out.close()
    launched.err.close()
    rusage = {}
    if os.path.exists(launched.report_path):
        with open(launched.report_path) as f:
            rusage = _parse_pairs(f.read())
    shutil.rmtree(launched.tmp, ignore_errors=True)
    if timed_out:
        return RunResult(False, f"timed out after {timeout} s", stdout=stdout, stderr_tail=stderr[-2000:])

    result = RunResult(True, stdout=stdout, stderr_tail=stderr[-2000:], values=_parse_pairs(stdout))
    if rusage:
        result.wall_s = int(rusage["wall_ns"]) / 1e9
        result.maxrss_kib = int(rusage["maxrss_kib"])
        result.minflt = int(rusage["minflt"])
        result.majflt = int(rusage["majflt"])
        result.utime_s = int(rusage["utime_us"]) / 1e6
        result.stime_s = int(rusage["stime_us"]) / 1e6

    if _PRELOAD_FAILED in stderr:
        result.ok, result.error = False, "LD_PRELOAD failed: " + stderr.strip().splitlines()[0]
    elif proc.returncode != 0:
        code = proc.returncode
        how = f"killed by signal {code - 128}" if code > 128 else f"exit status {code}"
        result.ok, result.error = False, how
    elif not rusage:
        result.ok, result.error = False, "bench_launch wrote no report"
    return result


def run(launcher, argv, preload=None, timeout=300, env=None, cwd=None):
    """Runs `argv` to the end under bench_launch (start, then finish)."""
    return finish(start(launcher, argv, preload, env, cwd), timeout)
