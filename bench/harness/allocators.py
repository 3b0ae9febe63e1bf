"""The allocators under comparison and the shared objects that provide them.

glibc is the baseline and needs no preload; every other allocator is the
same workload binary run with LD_PRELOAD pointing at its malloc library.
A variant is a library plus environment settings for the workload (e.g.
memd with another page-discard policy), so a policy's cost is measured on
the very same binary, in the same run, beside the default.
"""
import os
from dataclasses import dataclass, field

# Variants of the memd shim: name -> environment given to the workload only.
# memd-immediate is the Vam paper's policy (every empty page is madvise()d
# back at once), the foil for memd's default hysteresis; memd-never keeps
# every page it ever touched, a bound on what discarding costs at all.
MEMD_VARIANTS = {
    "memd-immediate": {"MEMD_DISCARD": "immediate"},
    "memd-never": {"MEMD_DISCARD": "never"},
    # The Vam paper's boundary: segregated classes stop at 496 bytes and
    # everything to 32 KiB takes the large path (the foil for memd's classes
    # up to 16 KiB).
    "memd-paper-classes": {"MEMD_MEDIUM_MAX": "496"},
}

# Report order; glibc first because every ratio is taken against it.
ALL = ["glibc", "jemalloc", "mimalloc", "tcmalloc", "memd"] + list(MEMD_VARIANTS)
# What runs without --allocators: memd-never answers a narrower question
# (is discarding worth anything here?) and costs another column, so it is
# opt-in.
DEFAULT = [a for a in ALL if a not in ("memd-never", "memd-paper-classes")]

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
    # Set for the measured process only (by bench_launch), never for the
    # harness: a variant's settings must not leak into anything else.
    env: dict = field(default_factory=dict)


def _find_library(filename):
    for directory in LIBRARY_DIRS:
        path = os.path.join(directory, filename)
        if os.path.isfile(path):
            return path
    return None


# Where each peer's library is on this machine (None: not installed).
PEER_PATHS = {name: _find_library(filename) for name, filename in PEER_LIBRARIES.items()}


def libc_preload():
    """What to preload to run a program on glibc's malloc even if it links
    another allocator itself (Debian's redis-server links libjemalloc, which
    comes before libc in its library order): a preloaded libc is searched
    first, so its malloc wins. For any other program it changes nothing."""
    return _find_library("libc.so.6")


def resolve(names, build_dir):
    """Returns (usable allocators, {name: reason skipped})."""
    usable, skipped = [], {}
    for name in names:
        if name == "glibc":
            usable.append(Allocator("glibc", None))
        elif name == "memd" or name in MEMD_VARIANTS:
            path = os.path.abspath(os.path.join(build_dir, MEMD_SHIM))
            if os.path.isfile(path):
                usable.append(Allocator(name, path, dict(MEMD_VARIANTS.get(name, {}))))
            else:
                skipped[name] = f"{path} not found (build the memd-malloc target first)"
        else:
            path = _find_library(PEER_LIBRARIES[name])
            if path:
                usable.append(Allocator(name, path))
            else:
                skipped[name] = f"{PEER_LIBRARIES[name]} not found in {', '.join(LIBRARY_DIRS)}"
    return usable, skipped
