#!/usr/bin/env python3
"""What the shim brings into a C program: libc, and nothing else.

The shim carries the little of the C++ runtime it needs, hidden, so a C
program under it (cat here, reading its own /proc/self/maps) must map no
libstdc++, libgcc_s, libm or absl library; the shim itself must need only
libc (and the loader). Under the glibc allocator the same program maps none
of them either, which the test checks first: it shows the program was a C
program to begin with.
"""
import argparse
import os
import subprocess
import sys

FOREIGN = ("libstdc++", "libgcc_s", "libm.so", "libm-", "libabsl")


def mapped_libraries(env):
    run = subprocess.run(["cat", "/proc/self/maps"], env=env, capture_output=True, text=True, timeout=60)
    if run.returncode != 0:
        raise SystemExit(f"FAIL: cat exited {run.returncode}: {run.stderr}")
    paths = set()
    for line in run.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[5].startswith("/"):
            paths.add(os.path.basename(fields[5]))
    return paths


def needed(lib):
    out = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True, check=True).stdout
    return sorted(line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    args = ap.parse_args()
    failures = []

    plain = mapped_libraries(dict(os.environ))
    if any(any(f in p for f in FOREIGN) for p in plain):
        failures.append(f"cat maps C++ runtime libraries without the shim: {sorted(plain)}")

    under = mapped_libraries(dict(os.environ, LD_PRELOAD=args.lib))
    shim_name = os.path.basename(args.lib)
    if shim_name not in under:
        failures.append(f"the shim is not mapped under LD_PRELOAD: {sorted(under)}")
    foreign = sorted(p for p in under if any(f in p for f in FOREIGN))
    if foreign:
        failures.append(f"the shim brought {foreign} into a C program")

    want = {"libc.so.6", "ld-linux-x86-64.so.2"}
    got = set(needed(args.lib))
    if not got <= want:
        failures.append(f"the shim needs {sorted(got - want)} besides libc")

    for f in failures:
        print("FAIL:", f)
    if not failures:
        print(f"ok: under the shim cat maps {len(under)} files, none of the C++ runtime")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
