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
    """Commit of the memd tree measured, with '+dirty' for uncommitted edits.
    Result files (bench/results) are outputs, not the tree measured: a run
    that follows another in one session is not dirty for the first's."""
    head = _command(["git", "rev-parse", "--short", "HEAD"], cwd=repo_dir)
    if not head:
        return "no commit"
    dirty = _command(["git", "status", "--porcelain", "--", ".", ":(exclude)bench/results"], cwd=repo_dir)
    return head + ("+dirty" if dirty else "")


def report_header(title, date, command, packages, repo_dir, load_before, load_after):
    """The first lines of a results file: what ran, where, on which tree,
    and how loaded the machine was before and after."""
    m = describe()
    versions = package_versions(packages)
    return [
        f"# {title} — {date}",
        "",
        f"- Command: `{command}` (from the top of the source tree)",
        f"- Machine: `{m['uname']}`",
        f"- CPU: {m['cpu_model']}, nproc {m['nproc']}, memory {m['memory']}",
        f"- Compiler: {m['compiler']}",
        "- Packages: " + ", ".join(f"{k} {v}" for k, v in versions.items()),
        f"- memd tree: {git_revision(repo_dir)}",
        f"- Load average before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}; "
        f"after: {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}",
        "",
    ]
