"""The allocators under comparison and the shared objects that provide them.

glibc is the baseline and needs no preload; every other allocator is the
same workload binary run with LD_PRELOAD pointing at its malloc library.
"""
import os
from dataclasses import dataclass

# Report order; glibc first because every ratio is taken against it.
ALL = ["glibc", "jemalloc", "mimalloc", "tcmalloc", "memd"]

# The Debian runtime packages' libraries. tcmalloc_minimal is the variant
# without the heap profiler, i.e. the one people actually preload.
PEER_LIBRARIES = {
    "jemalloc": "libjemalloc.so.2",
    "mimalloc": "libmimalloc.so.2",
    "tcmalloc": "libtcmalloc_minimal.so.4",
}
PEER_PACKAGES = ["libjemalloc2", "libmimalloc2.0", "libtcmalloc-minimal4", "libc6"]

# Built by the CMake target memd-malloc.
MEMD_SHIM = os.path.join("client", "libmemd-malloc.so")

LIBRARY_DIRS = ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib"]


@dataclass(frozen=True)
class Allocator:
    name: str
    preload: str | None  # None: the C library's own malloc


def _find_library(filename):
    for directory in LIBRARY_DIRS:
        path = os.path.join(directory, filename)
        if os.path.isfile(path):
            return path
    return None


def resolve(names, build_dir):
    """Returns (usable allocators, {name: reason skipped})."""
    usable, skipped = [], {}
    for name in names:
        if name == "glibc":
            usable.append(Allocator("glibc", None))
        elif name == "memd":
            path = os.path.abspath(os.path.join(build_dir, MEMD_SHIM))
            if os.path.isfile(path):
                usable.append(Allocator("memd", path))
            else:
                skipped[name] = f"{path} not found (build the memd-malloc target first)"
        else:
            path = _find_library(PEER_LIBRARIES[name])
            if path:
                usable.append(Allocator(name, path))
            else:
                skipped[name] = f"{PEER_LIBRARIES[name]} not found in {', '.join(LIBRARY_DIRS)}"
    return usable, skipped
