#!/usr/bin/env python3
"""The malloc shim's debug and profile methods and its trace (VMDEBUG,
VMPROFILE, VMTRACE, MEMD_METHOD=debug|profile, MEMD_TRACE), checked on the paper's Figure 8 program and on
a program that makes one error per case.

    check_debug_method.py --lib libmemd-malloc.so --figure8 PROG --cases PROG

Figure 8 (the Vmalloc paper, built with VMFL so that sites are t.c lines)
must give Figure 9's three reports: the overwrite of the block allocated on
line 4 (bad byte 4), the free of an unallocated block on line 6 (a string
literal) and the second free, on line 19, of the block freed on line 12;
with that block's address watched, two alerts (allocated on line 10, freed
on line 12). Each case of the other program must give exactly its report,
naming the block and the bad byte, with sites as object+offset that
addr2line maps back to the line of the call. The profile of Figure 8 must
be Figure 10's summary of its two allocations by line (the paper's third, of
12 bytes, was its stdio buffer), and a threaded program's per-site lines
must add up to its totals. A trace of Figure 8 must be Figure 10's three
lines, and a threaded program's trace must replay (no free of a block that
is not live, no allocation of one that is).
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

REPORT = re.compile(r"^memd: (.*)$", re.M)
failures = []


def run(argv, lib, env_extra, no_aslr=False):
    env = dict(os.environ, LD_PRELOAD=lib, **env_extra)
    for k in ("VMDEBUG", "MEMD_METHOD", "MEMD_DEBUG", "VMETHOD", "VMPROFILE"):
        if k not in env_extra:
            env.pop(k, None)
    if no_aslr:
        argv = ["setarch", os.uname().machine, "-R"] + argv
        env = dict(env)
        # setarch itself runs under the shim too; that is harmless.
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, REPORT.findall(p.stderr)


def expect(name, cond, detail):
    if not cond:
        failures.append(f"{name}: {detail}")


def matches(reports, patterns):
    """Each pattern matches one report, in order, and nothing is left over."""
    if len(reports) != len(patterns):
        return False
    return all(re.fullmatch(p, r) for p, r in zip(patterns, reports))


BLOCK = r"0x[0-9a-f]+"
CORRUPT_4 = rf"corrupted data:region=\(process\):block={BLOCK}:bad byte at=4:allocated at=t\.c,4:"
UNALLOCATED_6 = rf"free error:region=\(process\):block={BLOCK}:unallocated block:detected at=t\.c,6:"
FREED_19 = rf"free error:region=\(process\):block=({BLOCK}):already freed:detected at=t\.c,19:"


def figure8(lib, prog):
    # Checked when freed and at exit: the leaked block's overwrite last.
    rc, _, reports = run([prog], lib, {"VMDEBUG": "1"})
    expect("figure8 VMDEBUG=1", rc == 0 and matches(reports, [UNALLOCATED_6, FREED_19, CORRUPT_4]),
           f"exit {rc}, reports {reports}")
    # Every block checked at every call (VM_DBCHECK): Figure 9's order.
    # VMETHOD=Vmdebug (the paper's name) selects the same method.
    rc, _, reports = run([prog], lib, {"VMETHOD": "Vmdebug"})
    expect("figure8 VMETHOD=Vmdebug", rc == 0 and matches(reports, [UNALLOCATED_6, FREED_19, CORRUPT_4]),
           f"exit {rc}, reports {reports}")
    rc, _, reports = run([prog], lib, {"VMETHOD": "Vmlast"})
    expect("figure8 VMETHOD=Vmlast refused", rc != 0 or (reports and "VMETHOD=Vmlast" in reports[0]),
           f"exit {rc}, reports {reports}")
    for env in ({"VMDEBUG": "1,check"}, {"MEMD_METHOD": "debug", "MEMD_DEBUG": "check"}):
        rc, _, reports = run([prog], lib, env)
        expect(f"figure8 {env}", rc == 0 and matches(reports, [CORRUPT_4, UNALLOCATED_6, FREED_19]),
               f"exit {rc}, reports {reports}")
    # The twice-freed block's address, watched in a second run at the same
    # addresses (no address randomisation in either run).
    rc, _, reports = run([prog], lib, {"VMDEBUG": "1,check"}, no_aslr=True)
    m = re.fullmatch(FREED_19, reports[-1]) if reports else None
    expect("figure8 first run", m is not None, f"reports {reports}")
    if m:
        block = m.group(1)
        rc, _, reports = run([prog], lib, {"VMDEBUG": f"1,check,{block}"}, no_aslr=True)
        b = re.escape(block)
        expect("figure8 watched", rc == 0 and matches(reports, [
            CORRUPT_4, UNALLOCATED_6,
            rf"alert:region=\(process\):block={b}:size=5:just allocated:detected at=t\.c,10:",
            rf"alert:region=\(process\):block={b}:size=5:being freed:detected at=t\.c,12:",
            rf"free error:region=\(process\):block={b}:already freed:detected at=t\.c,19:"]),
            f"exit {rc}, reports {reports}")
    # VM_DBABORT: the first error ends the program.
    rc, _, reports = run([prog], lib, {"VMDEBUG": "1,abort"})
    expect("figure8 abort", rc == -signal.SIGABRT and matches(reports, [UNALLOCATED_6]),
           f"exit {rc}, reports {reports}")
    # The method is off unless asked for: the shim's own reports.
    rc, _, reports = run([prog], lib, {})
    expect("figure8 without the method", rc == 0 and len(reports) == 2
           and "pointer not allocated by memd" in reports[0] and "double free" in reports[1],
           f"exit {rc}, reports {reports}")
    # A setting it does not know: said, and the method stays off.
    rc, _, reports = run([prog], lib, {"VMDEBUG": "1,sometimes"})
    expect("figure8 bad setting", rc == 0 and reports and "VMDEBUG=1,sometimes" in reports[0],
           f"exit {rc}, reports {reports}")


def source_line(prog, site):
    """The file:line addr2line gives for 'object+0xoffset' (the call before it)."""
    obj, off = site.rsplit("+", 1)
    if shutil.which("addr2line") is None:
        return None
    out = subprocess.run(["addr2line", "-e", obj, hex(int(off, 16) - 1)], capture_output=True, text=True).stdout
    return out.strip().split(" ")[0]


def line_of(source, text):
    with open(source, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if text in line:
                return n
    raise AssertionError(text)


def cases(lib, prog, source):
    site = r"(\S+\+0x[0-9a-f]+)"
    rc, out, reports = run([prog, "clean"], lib, {"VMDEBUG": "1"})
    expect("clean", rc == 0 and out.strip() == "ok" and not reports, f"exit {rc}, out {out!r}, reports {reports}")

    rc, out, reports = run([prog, "underrun"], lib, {"VMDEBUG": "1"})
    m = re.fullmatch(rf"corrupted data:region=\(process\):block={BLOCK}:bad byte at=-1:allocated at={site}:"
                     rf"detected at={site}:", reports[0]) if len(reports) == 1 else None
    expect("underrun", rc == 0 and m is not None, f"exit {rc}, reports {reports}")
    if m and source and shutil.which("addr2line"):
        got = source_line(prog, m.group(1))
        want = f"{os.path.basename(source)}:{line_of(source, 'char* p = malloc(8);')}"
        expect("underrun allocation site", got is not None and got.endswith(want), f"{got} != ...{want}")
        got = source_line(prog, m.group(2))
        want = f"{os.path.basename(source)}:{line_of(source, 'the byte before the block') + 1}"
        expect("underrun detection site", got is not None and got.endswith(want), f"{got} != ...{want}")

    rc, out, reports = run([prog, "overrun"], lib, {"VMDEBUG": "1"})
    block = re.search(r"block (0x[0-9a-f]+)", out)
    expect("overrun", rc == 0 and block and len(reports) == 1 and re.fullmatch(
        rf"corrupted data:region=\(process\):block={block.group(1)}:bad byte at=11:allocated at={site}:"
        rf"detected at={site}:", reports[0]), f"exit {rc}, out {out!r}, reports {reports}")

    rc, out, reports = run([prog, "after_free"], lib, {"VMDEBUG": "1"})
    block = re.search(r"block (0x[0-9a-f]+)", out)
    expect("write after free", rc == 0 and block and len(reports) == 1 and re.fullmatch(
        rf"corrupted data:region=\(process\):block={block.group(1)}:bad byte at=5:written after free:"
        rf"allocated at={site}:", reports[0]), f"exit {rc}, out {out!r}, reports {reports}")

    rc, out, reports = run([prog, "realloc_freed"], lib, {"VMDEBUG": "1"})
    expect("realloc of a freed block", rc == 0 and out.strip() == "ok" and len(reports) == 1 and re.fullmatch(
        rf"resize error:region=\(process\):block={BLOCK}:already freed:detected at={site}:", reports[0]),
        f"exit {rc}, out {out!r}, reports {reports}")

    rc, out, reports = run([prog, "interior"], lib, {"VMDEBUG": "1"})
    expect("free inside a block", rc == 0 and len(reports) == 1 and re.fullmatch(
        rf"free error:region=\(process\):block={BLOCK}:unallocated block:detected at={site}:", reports[0]),
        f"exit {rc}, out {out!r}, reports {reports}")


def summary(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def counts(line):
    return {k: int(v) for k, v in re.findall(r"(n_alloc|n_free|s_alloc|s_free|max_busy|extent)=(\d+)", line)}


def profiles(lib, figure8_prog, cases_prog, scratch):
    # Figure 10's summary for the Figure 8 program: its two allocations by
    # line (the frees on lines 6 and 19 are errors, reported, not counted).
    out = os.path.join(scratch, "figure8.profile")
    rc, _, reports = run([figure8_prog], lib, {"VMPROFILE": out})
    lines = summary(out) if os.path.exists(out) else []
    want = [r"ALLOCATION USAGE SUMMARY:n_alloc=2:n_free=1:s_alloc=9:s_free=5:",
            r"region=\(process\):n_alloc=2:n_free=1:s_alloc=9:s_free=5:max_busy=9:extent=\d+:",
            r"file=t\.c:n_alloc=2:n_free=1:s_alloc=9:s_free=5:",
            r"    line=4:region=\(process\):n_alloc=1:n_free=0:s_alloc=4:s_free=0:",
            r"    line=10:region=\(process\):n_alloc=1:n_free=1:s_alloc=5:s_free=5:"]
    expect("figure8 profile", rc == 0 and matches(lines, want), f"exit {rc}, summary {lines}")
    expect("figure8 profile reports", len(reports) == 2 and all("free error" in r for r in reports),
           f"reports {reports}")
    # Debug and profile at once: Figure 9's reports and the same summary.
    out = os.path.join(scratch, "figure8-debug.profile")
    rc, _, reports = run([figure8_prog], lib, {"VMDEBUG": "1", "VMPROFILE": out})
    lines = summary(out) if os.path.exists(out) else []
    expect("figure8 debug and profile", rc == 0 and matches(reports, [UNALLOCATED_6, FREED_19, CORRUPT_4])
           and matches(lines, want), f"exit {rc}, reports {reports}, summary {lines}")
    # A threaded program without sites: every return address a line of its
    # own under file=<>, and the lines add up to the totals.
    out = os.path.join(scratch, "clean.profile")
    rc, stdout, reports = run([cases_prog, "clean"], lib, {"MEMD_METHOD": "profile", "MEMD_PROFILE": out})
    lines = summary(out) if os.path.exists(out) else []
    ok = rc == 0 and stdout.strip() == "ok" and not reports and len(lines) > 3
    if ok:
        total = counts(lines[0])
        pcs = [counts(l) for l in lines if l.startswith("    pc=")]
        added = {k: sum(c[k] for c in pcs) for k in ("n_alloc", "n_free", "s_alloc", "s_free")}
        ok = (total["n_alloc"] >= 4 * 20000 and added == total and counts(lines[1])["max_busy"] > 0
              and any(l.startswith(f"    pc={cases_prog}+0x") for l in lines))
    expect("threaded profile", ok, f"exit {rc}, reports {reports}, summary head {lines[:6]}")


TRACE = re.compile(r"^(0x[0-9a-f]+):(0x[0-9a-f]+):(\d+):\(process\):(best|debug|profile):([^:]+):(\d+):(\d+):$")


def traces(lib, figure8_prog, cases_prog, scratch):
    # Figure 10's trace of Figure 8: two allocations and a free, by line; the
    # failed frees (lines 6 and 19) are reported and not traced.
    out = os.path.join(scratch, "figure8.trace")
    rc, _, reports = run([figure8_prog], lib, {"VMTRACE": out})
    lines = summary(out) if os.path.exists(out) else []
    parsed = [TRACE.match(l) for l in lines]
    ok = rc == 0 and len(parsed) == 3 and all(parsed) and len(reports) == 2
    if ok:
        a, b, c = (m.groups() for m in parsed)
        ok = (a[0] == "0x0" and a[2] == "4" and a[4] == "t.c,4" and b[0] == "0x0" and b[2] == "5"
              and b[4] == "t.c,10" and c[0] == b[1] and c[1] == "0x0" and c[2] == "5" and c[4] == "t.c,12"
              and all(m.group(4) == "best" for m in parsed))
    expect("figure8 trace", ok, f"exit {rc}, trace {lines}, reports {reports}")
    # A threaded program's trace replays: every free and resize names a
    # block live at that line, every allocation a block that is not; times
    # never go back in one thread; the lines count the program's calls.
    out = os.path.join(scratch, "clean.trace")
    rc, stdout, reports = run([cases_prog, "clean"], lib, {"MEMD_TRACE": out, "VMDEBUG": "1"})
    lines = summary(out) if os.path.exists(out) else []
    live, last_time, bad, allocs = {}, {}, [], 0
    for n, line in enumerate(lines, 1):
        m = TRACE.match(line)
        if not m:
            bad.append(f"line {n} is not a trace line: {line!r}")
            break
        old, new, size, _, _, thread, t = m.groups()
        if int(t) < last_time.get(thread, 0):
            bad.append(f"line {n}: time goes back in thread {thread}")
        last_time[thread] = int(t)
        if old != "0x0":
            if old not in live:
                bad.append(f"line {n}: {old} is not live")
            live.pop(old, None)
        if new != "0x0":
            if new in live:
                bad.append(f"line {n}: {new} is live already")
            live[new] = int(size)
            allocs += old == "0x0"
        if len(bad) > 5:
            break
    expect("threaded trace", rc == 0 and stdout.strip() == "ok" and not reports and not bad
           and allocs >= 4 * 20000 and len(last_time) >= 5, f"exit {rc}, problems {bad}, allocations {allocs}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", required=True)
    p.add_argument("--figure8", required=True)
    p.add_argument("--cases", required=True)
    p.add_argument("--cases-source", help="debug_program.c, to map sites back to lines")
    args = p.parse_args()
    figure8(os.path.abspath(args.lib), args.figure8)
    cases(os.path.abspath(args.lib), args.cases, args.cases_source)
    with tempfile.TemporaryDirectory() as scratch:
        profiles(os.path.abspath(args.lib), args.figure8, args.cases, scratch)
        traces(os.path.abspath(args.lib), args.figure8, args.cases, scratch)
    for f in failures:
        print("FAIL:", f)
    if failures:
        return 1
    print("debug method: every report as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
