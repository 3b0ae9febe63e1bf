#!/usr/bin/env python3
"""The malloc shim in daemon mode: an unmodified program's heap in a memd region.

Starts a real memd (temporary socket and data directory, its own shm
namespace), runs a program with and without LD_PRELOAD=<shim> and
MEMD_REGION=<region> through run_compare.py (same output required), then
asks the daemon, with memdctl, whether the program really allocated in the
region (lease calls were made and objects the program left behind are
there) and whether the region passes its check.

  daemon_mode_check.py --memd BIN --memdctl BIN --compare run_compare.py --lib SHIM
                       [--env K=V]... -- program args...
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../support"))
from memd_daemon import MemdDaemon  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memd", required=True)
    ap.add_argument("--memdctl", required=True)
    ap.add_argument("--compare", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd

    work = tempfile.mkdtemp(prefix="memd-shim-daemon-")
    sock = os.path.join(work, "memd.sock")
    ns = "shim%d" % os.getpid()
    region = "program-heap"
    memd = MemdDaemon(args.memd, work, socket_path=sock, namespace=ns)
    memd.start()
    try:
        env = ["MEMD_SOCKET=" + sock, "MEMD_REGION=" + region, "MEMD_REGION_REQUIRED=1"]
        compare = [sys.executable, args.compare, "--lib", args.lib, "--timeout", str(args.timeout)]
        for e in args.env + env:
            compare += ["--env", e]
        # MEMD_* are harmless without the shim: both runs get them.
        rc = subprocess.call(compare + ["--"] + cmd)
        if rc != 0:
            print("run_compare failed (%d); memd log:\n%s" % (rc, open(os.path.join(work, "memd.log")).read()))
            return 1
        ctl = [args.memdctl, "--socket", sock]
        stat = json.loads(subprocess.check_output(ctl + ["--json", "stat", region]))
        print("region after the run:", json.dumps(stat, sort_keys=True))
        if int(stat.get("lease_rpcs", 0)) == 0:
            print("FAIL: the program made no lease call: its heap was not in the region")
            return 1
        if int(stat.get("objects", 0)) == 0 and int(stat.get("blocks_abandoned", 0)) == 0:
            print("FAIL: nothing of the program's heap is in the region")
            return 1
        check = subprocess.run(ctl + ["check", region], capture_output=True, text=True)
        print(check.stdout.strip())
        if check.returncode != 0:
            print("FAIL: region check:", check.stdout, check.stderr)
            return 1
        return 0
    finally:
        memd.close()  # stopped, its shm objects removed
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
