"""Helpers for bench/run_all.py: one module per job (allocators, workloads,
running a process, machine facts, statistics, the micro benchmark, and the
Markdown report)."""
