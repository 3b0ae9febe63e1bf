"""The workload programs (built from bench/workloads/) and how to call them."""
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Workload:
    name: str
    multi_threaded: bool
    summary: str

    def argv(self, bin_dir, threads, scale):
        # Every workload takes `[threads] [scale]`; single-threaded ones insist on 1.
        return [os.path.join(bin_dir, self.name), str(threads if self.multi_threaded else 1), f"{scale:g}"]


WORKLOADS = [
    Workload("wl_threads_churn", True, "threads churning 8-128 B objects, larson-style hand-over"),
    Workload("wl_producer_consumer", True, "cross-thread frees through a queue (xmalloc-test)"),
    Workload("wl_symbolic", False, "expression trees, strings, maps: parse/rewrite/expand"),
    Workload("wl_lifetime_mix", False, "100k long-lived objects + short-lived 16 B-32 KiB churn"),
    Workload("wl_realloc_growth", False, "buffers grown by realloc to a few hundred KiB"),
    Workload("wl_large_buffers", False, "64 KiB-4 MiB buffers allocated, touched, freed"),
    Workload("wl_mass_free", False, "300 MB built, 95% freed, RSS checked after 200 ms"),
]

MICRO = "bench_malloc_micro"


def select(only):
    """Workloads named in `only` (with or without the wl_ prefix), or all."""
    if not only:
        return list(WORKLOADS)
    wanted = {n if n.startswith("wl_") else "wl_" + n for n in only}
    return [w for w in WORKLOADS if w.name in wanted]
