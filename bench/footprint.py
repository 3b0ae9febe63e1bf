#!/usr/bin/env python3
"""The fixed footprint: what each allocator costs a short program that
allocates little, in peak RSS and page faults.

Runs a few small programs from Debian (C: cat, sort, python3 starting up)
and one of memd's (C++: a child of wl_small_program) under glibc, jemalloc,
mimalloc, tcmalloc and memd's shim, every allocator in every round, through
bench_launch (wait4 rusage of the program alone). Each ratio to glibc is
taken within a round, then the median over the rounds.

  python3 bench/footprint.py --build build/release --rounds 15 [--shim NAME=PATH ...]

--shim adds another build of memd's shim (an earlier tree's, say) as one
more allocator in the same rounds.
"""
import argparse
import datetime
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import allocators as allocator_list  # noqa: E402
from harness import launch, machine, result_files, stats  # noqa: E402

PACKAGES = ["libc6", "libjemalloc2", "libmimalloc2.0", "libtcmalloc-minimal4", "coreutils", "python3"]


def programs(build_dir, workdir):
    lines = os.path.join(workdir, "lines.txt")
    with open(lines, "w") as f:
        for i in range(2000):
            f.write(f"{(i * 7919) % 2000:05d} line {i}\n")
    return [
        ("cat (C): copies an empty file", "C", ["cat", "/dev/null"]),
        ("sort (C): sorts 2,000 lines", "C", ["sort", lines]),
        ("python3 (C): starts and exits", "C", ["python3", "-S", "-c", "pass"]),
        ("wl_small_program child (C++): 40k words counted", "C++",
         [os.path.join(build_dir, "bench", "wl_small_program"), "--child", "1"]),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--allocators", default="glibc,jemalloc,mimalloc,tcmalloc,memd")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--shim", action="append", default=[], metavar="NAME=PATH",
                    help="another libmemd-malloc.so to run beside the others")
    args = ap.parse_args()
    launcher = os.path.join(args.build, "bench", "bench_launch")
    if not os.path.isfile(launcher):
        sys.exit(f"footprint: {launcher} not found: build first")
    usable, skipped = allocator_list.resolve(args.allocators.split(","), args.build)
    for extra in args.shim:
        name, _, path = extra.partition("=")
        if not name or not os.path.isfile(path):
            sys.exit(f"footprint: --shim {extra}: want NAME=PATH of a shared object")
        usable.append(allocator_list.Allocator(name, os.path.abspath(path)))
    names = [a.name for a in usable]
    load_before = os.getloadavg()
    runs = {}  # program -> allocator -> list of (maxrss_kib, minflt) per round
    problems = []
    with tempfile.TemporaryDirectory(prefix="memd-footprint-") as workdir:
        progs = programs(args.build, workdir)
        for r in range(args.rounds):
            for title, _, argv in progs:
                for a in usable:
                    res = launch.run(launcher, argv, preload=a.preload, env=a.env, timeout=60)
                    if not res.ok:
                        problems.append(f"{title} under {a.name}, round {r + 1}: {res.error}")
                        runs.setdefault(title, {}).setdefault(a.name, []).append(None)
                        continue
                    runs.setdefault(title, {}).setdefault(a.name, []).append((res.maxrss_kib, res.minflt))
    load_after = os.getloadavg()
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    command = "python3 bench/footprint.py " + " ".join(sys.argv[1:])
    lines = machine.report_header("memd fixed footprint", date, command, PACKAGES,
                                  os.path.dirname(os.path.dirname(os.path.abspath(__file__))), load_before, load_after)
    lines += ["", f"Rounds: {args.rounds}; every allocator runs every program in every round. Peak RSS and minor "
              "page faults are wait4's for the program alone; each ratio to glibc is taken within a round, then "
              "the median over the rounds.", ""]
    if skipped:
        lines += [f"Skipped: {skipped}", ""]
    header = "| program | language | " + " | ".join(f"{n} peak RSS (KiB)" for n in names) + " | " + \
        " | ".join(f"{n} × glibc" for n in names if n != "glibc") + " | " + " | ".join(f"{n} faults" for n in names) + " |"
    lines += [header, "|" + "---|" * (2 + 3 * len(names) - 1)]
    for title, lang, _ in progs:
        per = runs.get(title, {})
        med_rss = [stats.median([x[0] for x in per.get(n, []) if x]) for n in names]
        med_flt = [stats.median([x[1] for x in per.get(n, []) if x]) for n in names]
        ratios = []
        for n in names:
            if n == "glibc":
                continue
            pairs = [a[0] / g[0] for a, g in zip(per.get(n, []), per.get("glibc", [])) if a and g]
            ratios.append(stats.median(pairs))
        lines.append(f"| {title} | {lang} | " + " | ".join(stats.fmt(v, 0) for v in med_rss) + " | " +
                     " | ".join(stats.fmt(v, 2, "×") for v in ratios) + " | " +
                     " | ".join(stats.fmt(v, 0) for v in med_flt) + " |")
    if problems:
        lines += ["", "Problems:"] + [f"- {p}" for p in problems]
    markdown = "\n".join(lines) + "\n"
    doc = {"date": date, "command": command, "rounds": args.rounds, "allocators": names, "runs": runs,
           "problems": problems}
    print(markdown)
    if not args.no_write:
        md_path, json_path = result_files.write_report_files(doc, markdown, args.out, "footprint")
        print(f"footprint: wrote {md_path} and {json_path}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
