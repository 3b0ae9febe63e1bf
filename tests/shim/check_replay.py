#!/usr/bin/env python3
"""memdctl replay, the trace-driven simulator, end to end: a trace recorded
under the shim (MEMD_TRACE) of a threaded program and of the Vmalloc paper's
Figure 8, replayed against glibc, mimalloc and each of memd's methods.

    check_replay.py --lib libmemd-malloc.so --memdctl memdctl --cases PROG --figure8 PROG

Every row must replay every call of the trace (its count of lines), with a
time and a space; the JSON form must say the same; a trace with a bad line,
the region methods (region, pool, last) must replay every call too, and a
replay must end with the blocks the trace left live (a Vmbest or Vmpool
region counting exactly those); an
unknown method and a missing file must fail with a message and the
documented exit status.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

failures = []


def expect(name, cond, detail):
    if not cond:
        failures.append(f"{name}: {detail}")


def record(lib, argv, path):
    env = dict(os.environ, LD_PRELOAD=lib, MEMD_TRACE=path)
    for k in ("VMDEBUG", "VMPROFILE", "VMTRACE", "MEMD_METHOD"):
        env.pop(k, None)
    subprocess.run(argv, env=env, capture_output=True, check=False, timeout=120)
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def memdctl(tool, *args):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    p = subprocess.run([tool, *args], env=env, capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", required=True)
    p.add_argument("--memdctl", required=True)
    p.add_argument("--cases", required=True)
    p.add_argument("--figure8", required=True)
    args = p.parse_args()
    lib = os.path.abspath(args.lib)
    with tempfile.TemporaryDirectory(prefix="memd-replay-") as tmp:
        threaded = os.path.join(tmp, "threaded.trace")
        calls = record(lib, [args.cases, "clean"], threaded)
        expect("recorded", calls > 80000, f"{calls} lines")
        targets = ["glibc", "mimalloc", "memd-best", "memd-debug", "memd-profile"]
        rc, out, err = memdctl(args.memdctl, "replay", threaded, "--allocators", "glibc,mimalloc", "--rounds", "2")
        rows = {m.group(1): m for m in re.finditer(r"^(\S+)\s+(\d+)\s+([\d.]+)\s+([\d.]+|-)\s+(\d+)\s+([\d.]+|-)$", out, re.M)}
        expect("table", rc == 0 and set(rows) == set(targets) and all(int(r.group(2)) == calls for r in rows.values())
               and rows["glibc"].group(4) == "1.00", f"exit {rc}, out {out!r}, err {err!r}")
        rc, out, err = memdctl(args.memdctl, "--json", "replay", threaded, "--allocators", "glibc", "--method", "best",
                               "--method", "debug", "--rounds", "1")
        try:
            data = json.loads(out)
        except ValueError:
            data = None
        expect("json", rc == 0 and data is not None and [d["target"] for d in data] == ["glibc", "memd-best", "memd-debug"]
               and all(d["calls"] == calls and d["seconds"] > 0 for d in data), f"exit {rc}, out {out!r}, err {err!r}")

        # Round trip: the replay ends with the blocks the traced program left
        # live, and a region replayed into counts exactly those.
        live = set()
        with open(threaded, encoding="utf-8") as f:
            for line in f:
                old, new = (int(x, 16) for x in line.split(":")[:2])
                live.discard(old)
                if new:
                    live.add(new)
        tool = os.path.join(os.path.dirname(os.path.abspath(args.memdctl)), "..", "replay", "memd-replay")
        for region in ("", "best", "pool"):
            env = dict(os.environ, MEMD_REPLAY_REGION=region)
            env.pop("LD_PRELOAD", None)
            run = subprocess.run([tool, threaded], env=env, capture_output=True, text=True, timeout=300)
            got = dict(kv.split("=") for kv in run.stdout.split())
            want_busy = str(len(live)) if region else "-1"
            expect(f"final state {region or 'glibc'}", run.returncode == 0 and got.get("live") == str(len(live))
                   and got.get("region_busy") == want_busy,
                   f"exit {run.returncode}, {len(live)} live in the trace, out {run.stdout!r} err {run.stderr[-500:]!r}")

        fig = os.path.join(tmp, "figure8.trace")
        n = record(lib, [args.figure8], fig)
        rc, out, err = memdctl(args.memdctl, "replay", fig, "--allocators", "glibc", "--method", "best", "--rounds", "1")
        expect("figure8", n == 3 and rc == 0 and re.search(r"^memd-best\s+3\s", out, re.M), f"{n} lines, exit {rc}, {out!r}")

        # memdctl pprof: the profile method's summary of the same program as
        # a pprof file; a trace is not a summary; a replay flag is not its.
        summary = os.path.join(tmp, "figure8.profile")
        env = dict(os.environ, LD_PRELOAD=lib, VMPROFILE=summary)
        subprocess.run([args.figure8], env=env, capture_output=True, check=False, timeout=120)
        out_pb = os.path.join(tmp, "figure8.pb")
        rc, out, err = memdctl(args.memdctl, "pprof", summary, "-o", out_pb)
        expect("pprof", rc == 0 and os.path.exists(out_pb) and os.path.getsize(out_pb) > 100,
               f"exit {rc}, err {err!r}")
        rc, out, err = memdctl(args.memdctl, "pprof", fig)
        expect("pprof of a trace", rc == 1 and "not a line of a profile summary" in err, f"exit {rc}, err {err!r}")
        rc, out, err = memdctl(args.memdctl, "pprof", summary, "--rounds", "2")
        expect("pprof flag", rc == 2 and "belongs to replay" in err, f"exit {rc}, err {err!r}")

        bad = os.path.join(tmp, "bad.trace")
        with open(bad, "w", encoding="utf-8") as f:
            f.write("0x0:0x10:5:(process):best:t.c,4:1:0:\nnot a trace line\n")
        rc, out, err = memdctl(args.memdctl, "replay", bad, "--allocators", "glibc", "--method", "best", "--rounds", "1")
        expect("bad trace", rc == 1 and "line 2" in out + err, f"exit {rc}, out {out!r}, err {err!r}")
        rc, out, err = memdctl(args.memdctl, "replay", fig, "--method", "bogus")
        expect("unknown method", rc == 2 and "unknown method" in err, f"exit {rc}, err {err!r}")

        # The region methods (vmalloc.h regions in memd-replay): every call
        # replayed; Vmlast keeps what the trace freed (all but the most
        # recent block), so it holds at least what Vmbest in a region does.
        rc, out, err = memdctl(args.memdctl, "--json", "replay", threaded, "--allocators", "glibc", "--method",
                               "region,pool,last", "--rounds", "1")
        try:
            data = {d["target"]: d for d in json.loads(out)}
        except ValueError:
            data = {}
        expect("region methods", rc == 0 and set(data) == {"glibc", "memd-region", "memd-pool", "memd-last"}
               and all(d.get("calls") == calls and d.get("seconds", 0) > 0 and len(d.get("rounds", [])) == 1
                       for d in data.values())
               and data["memd-last"]["space_kib"] >= data["memd-region"]["space_kib"],
               f"exit {rc}, out {out!r}, err {err!r}")
        rc, out, err = memdctl(args.memdctl, "replay", os.path.join(tmp, "missing.trace"))
        expect("missing trace", rc == 1 and "cannot read" in err, f"exit {rc}, err {err!r}")
    for f in failures:
        print("FAIL:", f)
    if failures:
        return 1
    print("replay: every target replayed every call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
