#!/usr/bin/env python3
"""The layering, checked on the sources:
heap/ <- disciplines/ <- region/ <- client/, daemon/ (proto/ beside them).

Each folder may include only from the folders below it. The daemon and the
tools may include only the region headers that say what a region is to its
owner -- never what a region is made of (region/region_impl.h, the
thread-heap pool, the arena, the page-heap owner, a client's leased
blocks), so that the daemon holds a region through Region's own calls --
and nothing of client/ (libmemd's process heap and daemon client). Exits 1
naming every include that breaks a rule, with its file and line.

    python3 tests/layering/check_includes.py <repository root>
"""
import os
import re
import sys

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
    "region/options.h",         # the environment's settings (MEMD_*), the default socket rule
}
# A region's internals: only region/ itself (and tests) include these.
REGION_PRIVATE = {"region/region_impl.h", "region/region_internals.h"}
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
                        if target in REGION_PRIVATE and top != "region":
                            yield f"{rel}:{n}: {target} is private to region/ (use Region's own calls)"
                        elif folder not in allowed:
                            yield f"{rel}:{n}: {top}/ may not include {target} ({folder}/ is above it)"
                        elif (top in ("daemon", "tools") and folder == "region"
                              and target not in REGION_HEADERS_FOR_SERVERS):
                            yield (f"{rel}:{n}: {top}/ may not include {target}: a region's internals "
                                   f"(allowed of region/: {', '.join(sorted(REGION_HEADERS_FOR_SERVERS))})")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    bad = list(violations(root))
    for v in bad:
        print(v)
    if bad:
        print(f"check_includes: {len(bad)} include(s) across the layers")
        return 1
    print("check_includes: the layers hold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
