"""Facts about the machine and software a result was measured on, so a
results file can be compared with (or reproduced on) another machine."""
import os
import platform
import subprocess


def _command(argv, cwd=None):
    try:
        return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, check=False).stdout.strip()
    except OSError:
        return ""


def _cpu_model():
    for line in _command(["lscpu"]).splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _total_memory():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    kib = int(line.split()[1])
                    return f"{kib / (1 << 20):.1f} GiB"
    except OSError:
        pass
    return "unknown"


def describe():
    return {
        "uname": _command(["uname", "-a"]) or " ".join(platform.uname()),
        "cpu_model": _cpu_model(),
        "nproc": os.cpu_count(),
        "memory": _total_memory(),
        "kernel": platform.release(),
        "compiler": _command(["c++", "--version"]).splitlines()[0] if _command(["c++", "--version"]) else "unknown",
        "python": platform.python_version(),
    }


def package_versions(packages):
    versions = {}
    for package in packages:
        out = _command(["dpkg-query", "-W", "-f=${Version}", package])
        versions[package] = out or "not installed"
    return versions


def git_revision(repo_dir):
    """Commit of the memd tree measured, with '+dirty' for uncommitted edits."""
    head = _command(["git", "rev-parse", "--short", "HEAD"], cwd=repo_dir)
    if not head:
        return "no commit"
    dirty = _command(["git", "status", "--porcelain"], cwd=repo_dir)
    return head + ("+dirty" if dirty else "")
