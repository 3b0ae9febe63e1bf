#!/usr/bin/env python3
"""The layering, checked on the sources:
heap/ <- disciplines/ <- region/ <- client/, daemon/ (proto/ beside them).

Each folder may include only from the folders below it. The daemon and the
tools may include only the region headers that say what a region is to its
owner -- never what a region is made of (region/region_impl.h, the
thread-heap pool, the arena, the page-heap owner, a client's leased
blocks), so that the daemon holds a region through Region's own calls --
and nothing of client/ (libmemd's process heap and daemon client) but
its public headers, which a tool uses as any program would. The
public headers (what a program using memd includes, and what an install
puts in place) include only each other, the C and C++ standard libraries
and Abseil: never the heap's internals. Exits 1 naming every include that
breaks a rule, with its file and line.

    python3 tests/layering/check_includes.py <repository root>
    python3 tests/layering/check_includes.py <repository root> --compile CXX [FLAG...]

With --compile, also copies the public headers alone into a scratch
directory and compiles each there by itself: a public header that needs
anything else fails to compile.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Folders of first-party code each folder may include from ("absl", "grpc",
# "memd" (generated protobuf) and other third-party prefixes are not ours).
OURS = {"heap", "disciplines", "region", "proto", "client", "daemon", "tools"}
MAY_INCLUDE = {
    "heap": {"heap"},
    "disciplines": {"disciplines", "heap"},
    "region": {"region", "disciplines", "heap"},
    # proto/wire_enums.h pins the wire's enums to the region's.
    "proto": {"proto", "region"},
    "client": {"client", "region", "proto", "disciplines", "heap"},
    "daemon": {"daemon", "region", "proto", "disciplines", "heap"},
    "tools": {"tools", "region", "proto", "heap"},
}
# What the daemon and the tools may include of region/.
REGION_HEADERS_FOR_SERVERS = {
    "region/region.h",          # Region: lifecycle, leases, stat/check/compact, owner facts
    "region/lease_service.h",   # the owner's lease ledger the daemon drives
    "region/options.h",         # the environment's settings (MEMD_*)
    "region/socket_paths.h",    # the default socket rule
}
# The manual's generator (tools/manual/) documents memd's settings from the
# daemon's own table and version: that much of daemon/, and nothing else.
DAEMON_HEADERS_FOR_MANUAL = {"daemon/config.h", "daemon/version.h"}
# A region's internals: only region/ itself (and tests) include these.
REGION_PRIVATE = {"region/region_impl.h", "region/region_internals.h"}
# The public headers: the C API, the C++ API (the process heap, regions,
# offset pointers and allocators, the daemon client) and the plain structs
# they return.
PUBLIC_HEADERS = {
    "client/memd.h", "client/memd_region.h", "client/memd_debug.h", "client/vmalloc.h", "client/memd_client.h",
    "client/memd.hpp",
    "client/heap.h", "client/allocators.h", "client/hinted.h", "client/daemon_client.h",
    "client/telemetry/sampling_default.h",
    "region/region.h", "region/offset_ptr.h", "region/region_allocator.h", "region/arena_handle.h",
    "heap/params.h", "heap/region_stats.h", "heap/counter_snapshot.h",
}
# The public headers in C (compiled as C too).
C_HEADERS = {"client/memd.h", "client/memd_region.h", "client/memd_debug.h", "client/vmalloc.h",
             "client/memd_client.h"}
# Third-party headers a public header may include (besides <...> ones).
PUBLIC_MAY_USE = ("absl/",)
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def violations(root):
    for top, allowed in MAY_INCLUDE.items():
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".h", ".cc", ".c")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = m.group(1)
                        folder = target.split("/", 1)[0]
                        if folder not in OURS:
                            continue
                        if top == "tools" and target in PUBLIC_HEADERS:
                            continue  # a tool may use memd's public API, as any program does
                        if rel.startswith("tools/manual/") and target in DAEMON_HEADERS_FOR_MANUAL:
                            continue
                        if target in REGION_PRIVATE and top != "region":
                            yield f"{rel}:{n}: {target} is private to region/ (use Region's own calls)"
                        elif folder not in allowed:
                            yield f"{rel}:{n}: {top}/ may not include {target} ({folder}/ is above it)"
                        elif (top in ("daemon", "tools") and folder == "region"
                              and target not in REGION_HEADERS_FOR_SERVERS):
                            yield (f"{rel}:{n}: {top}/ may not include {target}: a region's internals "
                                   f"(allowed of region/: {', '.join(sorted(REGION_HEADERS_FOR_SERVERS))})")


def public_violations(root):
    for rel in sorted(PUBLIC_HEADERS):
        path = os.path.join(root, rel)
        if not os.path.exists(path):
            yield f"{rel}: listed as public but missing"
            continue
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                # "memd_region.h": beside the header (as installed in include/memd).
                if m is None:
                    continue
                target = m.group(1) if "/" in m.group(1) else f"{os.path.dirname(rel)}/{m.group(1)}"
                if target not in PUBLIC_HEADERS and not m.group(1).startswith(PUBLIC_MAY_USE):
                    yield (f"{rel}:{n}: a public header may not include {m.group(1)} "
                           f"(not public: a program using memd would need the internals)")


def compile_violations(root, compiler):
    """Each public header, alone in a tree of the public headers, compiles."""
    with tempfile.TemporaryDirectory() as scratch:
        for rel in PUBLIC_HEADERS:
            os.makedirs(os.path.join(scratch, os.path.dirname(rel)), exist_ok=True)
            shutil.copy(os.path.join(root, rel), os.path.join(scratch, rel))
        for rel in sorted(PUBLIC_HEADERS):
            c = rel in C_HEADERS
            source = os.path.join(scratch, "use.c" if c else "use.cc")
            with open(source, "w", encoding="utf-8") as f:
                f.write(f'#include "{rel}"\n')
            command = list(compiler)
            if c:  # the C API compiles as C too
                command = [command[0], "-x", "c", "-std=c11"] + command[1:]
            else:
                command = [command[0], "-std=c++20"] + command[1:]
            run = subprocess.run(command + ["-fsyntax-only", "-I", scratch, source],
                                 capture_output=True, text=True)
            if run.returncode != 0:
                lines = run.stderr.strip().splitlines()
                first = next((l for l in lines if "error" in l), lines[0] if lines else "(no message)")
                first = first.replace(scratch + os.sep, "")
                yield f"{rel}: does not compile with only the public headers: {first}"


def main():
    args = sys.argv[1:]
    compiler = None
    if "--compile" in args:
        i = args.index("--compile")
        compiler = args[i + 1:]
        args = args[:i]
        if not compiler:
            print("check_includes: --compile needs a compiler")
            return 2
    root = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "..")
    bad = list(violations(root)) + list(public_violations(root))
    if compiler and not bad:
        bad += list(compile_violations(root, compiler))
    for v in bad:
        print(v)
    if bad:
        print(f"check_includes: {len(bad)} include(s) across the layers")
        return 1
    print("check_includes: the layers hold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
