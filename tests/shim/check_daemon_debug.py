#!/usr/bin/env python3
"""The malloc shim's debug and profile methods with MEMD_REGION: the region
keeps the books (the daemon's region, shared by every process that opens it).

    check_daemon_debug.py --memd BIN --memdctl BIN --lib libmemd-malloc.so --figure8 PROG

Starts a real memd (temporary socket, data directory, shm namespace), then:
  - runs Figure 8 (the Vmalloc paper's, sites recorded as t.c lines) with
    MEMD_REGION=fig MEMD_METHOD=debug: Figure 9's three reports, naming the
    region, in order; memdctl finds the region's method is debug and its
    check clean;
  - runs Figure 8 twice with MEMD_REGION=counted MEMD_METHOD=profile: the
    second run's summary counts both runs (the books are the region's);
  - asks for the debug method on the region made with profile: the program
    is told, naming both methods, and (MEMD_REGION_REQUIRED unset) runs on
    its process heap.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../support"))
from memd_daemon import MemdDaemon  # noqa: E402

failures = []


def expect(name, cond, detail):
    if not cond:
        failures.append(f"{name}: {detail}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memd", required=True)
    ap.add_argument("--memdctl", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--figure8", required=True)
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="memd-shim-daemon-debug-")
    sock = os.path.join(work, "memd.sock")
    memd = MemdDaemon(args.memd, work, socket_path=sock, namespace="dbg%d" % os.getpid())
    memd.start()
    try:
        base = {k: v for k, v in os.environ.items()
                if k not in ("VMDEBUG", "VMPROFILE", "VMETHOD", "MEMD_METHOD", "MEMD_DEBUG", "MEMD_PROFILE",
                             "VMTRACE", "MEMD_TRACE", "MEMD_REGION", "MEMD_REGION_REQUIRED")}
        base.update(LD_PRELOAD=args.lib, MEMD_SOCKET=sock)

        def run(extra):
            p = subprocess.run([args.figure8], env=dict(base, **extra), capture_output=True, text=True, timeout=60)
            return p.returncode, p.stderr

        # Figure 8 under the debug method, in the daemon's region.
        # With "check" every call checks every object: Figure 9's order.
        rc, err = run({"MEMD_REGION": "fig", "MEMD_REGION_REQUIRED": "1", "MEMD_METHOD": "debug",
                       "MEMD_DEBUG": "check"})
        reports = re.findall(r"^memd: (.*)$", err, re.M)
        expect("figure 8 exit", rc == 0, f"rc={rc}\n{err}")
        # The region is named as its backing object is (the daemon's shm
        # namespace, a dot, the name).
        want = [r"corrupted data:region=\S*fig:block=0x[0-9a-f]+:bad byte at=4:allocated at=t\.c,4:",
                r"free error:region=\S*fig:block=0x[0-9a-f]+:unallocated block:detected at=t\.c,6:",
                r"free error:region=\S*fig:block=0x[0-9a-f]+:already freed:detected at=t\.c,19:"]
        at = 0
        for w in want:
            found = next((i for i in range(at, len(reports)) if re.match(w, reports[i])), None)
            expect("figure 8 reports", found is not None, f"no report matching {w} (in order) in:\n{err}")
            if found is not None:
                at = found + 1
        ctl = [args.memdctl, "--socket", sock]
        regions = json.loads(subprocess.check_output(ctl + ["--json", "regions"]))
        text = json.dumps(regions)
        expect("memdctl list", '"fig"' in text and "debug" in text.lower(), text)
        check = subprocess.run(ctl + ["check", "fig"], capture_output=True, text=True)
        expect("memdctl check", check.returncode == 0, check.stdout + check.stderr)

        # The profile method: two runs, one set of books.
        summaries = []
        for i in range(2):
            path = os.path.join(work, "profile-%d.txt" % i)
            rc, err = run({"MEMD_REGION": "counted", "MEMD_REGION_REQUIRED": "1", "MEMD_METHOD": "profile",
                           "MEMD_PROFILE": path})
            expect("profile run", rc == 0, f"rc={rc}\n{err}")
            summaries.append(open(path).read() if os.path.exists(path) else "")
        first, second = summaries
        expect("profile first", first.startswith("ALLOCATION USAGE SUMMARY:n_alloc=2:n_free=1:s_alloc=9:s_free=5:\n"),
               first)
        expect("profile second",
               second.startswith("ALLOCATION USAGE SUMMARY:n_alloc=4:n_free=2:s_alloc=18:s_free=10:\n"), second)
        expect("profile by file", "file=t.c:n_alloc=4:n_free=2:s_alloc=18:s_free=10:\n" in second, second)
        expect("profile line 4", re.search(r"    line=4:region=\S*counted:n_alloc=2:n_free=0:s_alloc=8:s_free=0:\n",
                                           second) is not None, second)

        # Another method than the region's: told, naming both.
        rc, err = run({"MEMD_REGION": "counted", "MEMD_METHOD": "debug"})
        expect("wrong method refused", "profile" in err and "debug" in err and "not used" in err, err)
        expect("wrong method still runs", rc == 0, f"rc={rc}\n{err}")
    finally:
        memd.close()  # stopped, its shm objects removed
        if failures:
            print(open(os.path.join(work, "memd.log")).read())
        shutil.rmtree(work, ignore_errors=True)
    for f in failures:
        print("FAIL", f)
    if failures:
        return 1
    print("daemon-mode debug and profile methods: every check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
