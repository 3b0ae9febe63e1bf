"""The workloads and how to run one under an allocator.

Two kinds share one interface (name, summary, required, packages,
unavailable, prepare, measure), so run_all.py runs them in the same
interleaved rounds: the wl_* programs built from bench/workloads/, and real
programs from Debian (real_programs.py, redis_server.py).
"""
import os
from dataclasses import dataclass

from . import launch
from .real_programs import GccCompile, PythonObjects
from .redis_server import RedisServer


@dataclass(frozen=True)
class RunContext:
    """What every measurement needs, fixed for the whole run."""
    launcher: str
    bin_dir: str
    threads: int
    scale: float
    timeout: float
    workdir: str  # scratch space for inputs and outputs, removed after the run


@dataclass(frozen=True)
class Workload:
    name: str
    multi_threaded: bool  # takes --threads; otherwise always runs with 1
    summary: str
    binary: str = ""      # the program, when it is not `name` (one program, two thread counts)

    # Every workload prints both; see common.h.
    required = ("checksum", "peak_live_bytes")
    packages = ()

    @property
    def program(self):
        return self.binary or self.name

    def argv(self, bin_dir, threads, scale):
        # Every workload takes `[threads] [scale]`; single-threaded ones insist on 1.
        return [os.path.join(bin_dir, self.program), str(threads if self.multi_threaded else 1), f"{scale:g}"]

    def unavailable(self, bin_dir):
        path = os.path.join(bin_dir, self.program)
        return None if os.path.isfile(path) else f"{path} not built"

    def prepare(self, ctx):
        pass

    def measure(self, ctx, allocator):
        return launch.run(ctx.launcher, self.argv(ctx.bin_dir, ctx.threads, ctx.scale), allocator.preload,
                          ctx.timeout, allocator.env)


WORKLOADS = [
    Workload("wl_threads_churn", True, "threads churning 8-128 B objects, larson-style hand-over"),
    Workload("wl_producer_consumer", True, "cross-thread frees through a queue (xmalloc-test)"),
    Workload("wl_symbolic", False, "expression trees, strings, maps: parse/rewrite/expand"),
    Workload("wl_lifetime_mix", False, "100k long-lived objects + short-lived 16 B-32 KiB churn"),
    Workload("wl_realloc_growth", False, "buffers grown by realloc to a few hundred KiB"),
    Workload("wl_big_realloc", False, "4 buffers grown by realloc, x1.5 a step, to 4-48 MiB"),
    Workload("wl_large_buffers", False, "64 KiB-4 MiB buffers allocated, touched, freed"),
    Workload("wl_mass_free", False, "300 MB built, 95% freed, RSS checked after 200 ms"),
    Workload("wl_larson", True, "larson: 10-100 B slots replaced; each thread hands its array to a successor"),
    Workload("wl_cross_free", True, "threads in a ring free each other's 10-100 B objects, in generations"),
    Workload("wl_random_sizes", False, "log-uniform 8 B-64 KiB objects, random lifetimes, 1 thread"),
    Workload("wl_random_sizes_mt", True, "wl_random_sizes on --threads threads, a pool each", "wl_random_sizes"),
    Workload("wl_one_size", False, "20k live objects of one size replaced at random (3M times); 16, 48, 64, 128, 256 B in turn"),
    Workload("wl_one_size_mt", True, "wl_one_size on --threads threads, pools of their own", "wl_one_size"),
    Workload("wl_zeroed_buffers", False, "20 live 5-25 MiB buffers replaced at random, malloc + memset"),
    Workload("wl_calloc_buffers", False, "20 live 5-25 MiB buffers replaced at random, calloc"),
    Workload("wl_small_program", False, "40 runs of a short-lived process with ~2.4 MiB of hash maps and strings"),
    Workload("wl_cache_thrash", True, "active false sharing: threads' concurrent 8 B objects written hard"),
    Workload("wl_cache_scratch", True, "passive false sharing: 8 B objects freed by another thread, reused"),
    Workload("wl_phases", False, "phases of 96 MiB of one size (32 B-1 KiB) each, filled then all freed"),
    RedisServer(),
    PythonObjects(),
    GccCompile(),
]

MICRO = "bench_malloc_micro"


def select(only):
    """Workloads named in `only` (with or without the wl_ or real_ prefix;
    `real` for every real program), or all."""
    if not only:
        return list(WORKLOADS)
    wanted = {f"{prefix}{n}" for n in only for prefix in ("", "wl_", "real_")}
    return [w for w in WORKLOADS if w.name in wanted or ("real" in only and w.name.startswith("real_"))]
