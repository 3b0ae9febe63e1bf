"""The Markdown report of run_daemon.py, rendered from the results document
(the dict saved as JSON), so that a report can always be rendered again
from its JSON (`run_daemon.py --render FILE.json`)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness import report  # noqa: E402
from harness.stats import ratio  # noqa: E402

# The report's own reading of the results; the runner records the same in
# the document's settings (older documents fall back to these).
DEFAULT_ALLOCS_PER_CALL_TARGET = 100_000
DEFAULT_SHARED_ALLOCATORS = ("boost-shm", "memd-shm", "memd-daemon")


def _client_counts(doc):
    return sorted(v["clients"] for v in doc["latency"].values() if v["call"] == "lease")


def _allocs_target(doc):
    return doc["settings"].get("allocs_per_call_target", DEFAULT_ALLOCS_PER_CALL_TARGET)


def _us(v):
    if v is None:
        return "—"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def _times(r):
    """A ratio, readable from 0.001x to 10000x."""
    if r is None:
        return "—"
    return f"{r:,.0f}×" if r >= 100 else f"{r:.2f}×" if r >= 0.1 else f"{r:.2g}×"


def _header(doc):
    s = doc["settings"]
    lines = report.title_and_machine(doc, "memd daemon benchmarks", "Packages")
    lines += [
        f"- memd tree: {doc['memd_revision']}" + (
            "; uncommitted changes outside bench/ when the run started (built into the binaries as they were at "
            "build time): " + ", ".join(f"`{p}`" for p in doc["uncommitted_outside_bench"])
            if doc.get("uncommitted_outside_bench") else ""),
        "- Build directory up to date with the source tree (`ninja -n` of the measured targets has nothing "
        "to do) at the start and at the end of the run: " + {True: "yes", False: "**no** (see problems)",
                                                              None: "not checked"}[
            False if False in (doc["build_current"]["before"], doc["build_current"]["after"])
            else doc["build_current"]["after"]]
        + (f" ({doc['build_current']['why']})" if doc["build_current"]["why"] else ""),
        f"- Settings: rounds={s['rounds']} (interleaved, order rotated each round), lease-latency window="
        f"{s['lease_window_s']:g} s, shared-heap window={s['shared_window_s']:g} s and {s['shared_repeats']} runs "
        f"of each shared-heap case per round, batching scale={s['scale']:g}",
        f"- Load average (1, 5, 15 min) before the run: {doc['load_average']['before']}; after: "
        f"{doc['load_average']['after']}",
    ]
    cpu = doc.get("cpu")
    if cpu:
        lines.append(
            f"- Other work on the machine during the run: {cpu['other_s']:,.0f} CPU-seconds of the "
            f"{cpu['cpu_capacity_s']:,.0f} the {doc['machine']['nproc']} CPUs had in its {cpu['wall_s']:,.0f} s "
            f"({cpu['other_share'] * 100:.0f}%), besides the {cpu['own_s']:,.0f} this run's own processes used; "
            f"hypervisor steal {cpu['steal_s']:,.1f} s. (Busy time from `/proc/stat` minus the CPU time of this "
            "run's processes; the more of it, the noisier the figures.)")
    lines += [
        f"- The daemon: one memd for the whole run, started by the runner as `{doc['daemon']['command']}` "
        "(a temporary directory; every other setting memd's default, log level info); stopped with SIGTERM at "
        f"the end (exit status {doc['daemon']['exit_status']}). Its shm regions live in `/dev/shm` "
        f"({doc['daemon']['shm']['stat_f_type']}).",
    ]
    if s["inherited_env"]:
        lines.append("- Inherited from the environment: " + ", ".join(f"`{k}`" for k in s["inherited_env"]))
    lines += [f"- **Skipped {a}**: {why}" for a, why in s["skipped"].items()]
    return lines + [""]


def _targets(doc):
    lines = ["## Targets", ""]
    rows = []
    for t in doc["targets"]:
        result = "—" if t["met"] is None else ("**met**" if t["met"] else "**missed**")
        if not t["judged"]:
            result = "(not a stated target) " + ("meets the bar" if t["met"] else "below the bar")
        rows.append([t["goal"], t["case"], t["how"], result])
    lines += report._table(["target", "case", "measured", "result"], rows,
                           ["---", "---", "---", "---"]) + [""]
    met = [t for t in doc["targets"] if t["judged"] and t["met"]]
    missed = [t for t in doc["targets"] if t["judged"] and t["met"] is False]
    unknown = [t for t in doc["targets"] if t["judged"] and t["met"] is None]
    said = [f"{len(met)} of {len([t for t in doc['targets'] if t['judged']])} stated targets met"]
    if missed:
        said.append("missed: " + "; ".join(f"{t['goal']} ({t['how']})" for t in missed))
    if unknown:
        said.append("not measured: " + "; ".join(t["goal"] for t in unknown))
    return lines + ["In short: " + ". ".join(said) + ".", ""]


def _latency(doc):
    lat = doc["latency"]
    window = doc["settings"]["lease_window_s"]
    lines = ["## Lease RPC latency", "",
             f"Each client is a separate process (forked by a parent that never uses gRPC) with its own "
             "`memd::Client` (its session stream open) and its own lease slot in one shared shm region, opened with "
             "a raw `Regions.Open` on that client's channel and session. In a common window of "
             f"{window:g} s every client loops `Leases.Lease` (1 block of the 16-byte class, owned by its stash) "
             "then `Leases.Release` of that block, timing each blocking unary call on its own (the time includes "
             "the client's gRPC stack, the Unix socket, the daemon's handler and the region's lock). Latencies are "
             "medians over the rounds of each round's percentile over every call of every client; **calls/s** is "
             "all Lease and Release calls of all clients per second (Σ calls_i / loop time_i). The machine has "
             f"{doc['machine']['nproc']} CPUs: beyond that many clients, the clients and the daemon share them, so "
             "latency grows with queueing.", ""]
    headers = ["clients", "calls/s (all)", "Lease p50", "p99", "p99.9", "mean", "Release p50", "p99", "p99.9",
               "mean", "p50 range (rounds)", "calls > 50 ms"]
    rows = []
    for n in _client_counts(doc):
        s = lat.get(f"lease/{n}")
        if s is None:
            continue
        if s["failed"]:
            rows.append([n, f"**FAIL** ({s['error']})"] + [""] * (len(headers) - 2))
            continue
        rows.append([n, f"{s['calls_per_s']:,.0f}", _us(s["lease_p50_us"]), _us(s["lease_p99_us"]),
                     _us(s["lease_p999_us"]), _us(s["lease_mean_us"]), _us(s["release_p50_us"]),
                     _us(s["release_p99_us"]), _us(s["release_p999_us"]), _us(s["release_mean_us"]),
                     f"{_us(s['all_p50_min'])}–{_us(s['all_p50_max'])}",
                     f"{s['over_50ms_total']:,} of {s['samples_total']:,}"])
    lines += ["Round trip in µs:", ""] + report._table(headers, rows) + [""]
    s = lat.get("stats/1")
    if s is not None and not s["failed"]:
        lease1 = lat.get("lease/1")
        lines += [f"For scale, a plain unary call whose handler does next to nothing (`Admin.Stats`, on a channel "
                  f"of its own), 1 client: p50 **{_us(s['stats_p50_us'])} µs**, p99 {_us(s['stats_p99_us'])} µs, "
                  f"p99.9 {_us(s['stats_p999_us'])} µs, mean {_us(s['stats_mean_us'])} µs "
                  f"({s['calls_per_s']:,.0f} calls/s; {s['over_50ms_total']:,} of {s['samples_total']:,} calls over "
                  "50 ms)" + (
                      f". A Lease costs {ratio(lease1['lease_p50_us'], s['stats_p50_us']):.2f}× and a Release "
                      f"{ratio(lease1['release_p50_us'], s['stats_p50_us']):.2f}× that at the median: the RPC "
                      "itself, not the daemon's work, is the price."
                      if lease1 and not lease1["failed"] else "."), ""]
    elif s is not None:
        lines += [f"`Admin.Stats` at 1 client: **FAIL** ({s['error']})", ""]
    slow = [(k, v) for k, v in lat.items() if not v["failed"] and v["over_50ms_total"] > 0]
    if slow:
        tail = [n for n in _client_counts(doc) if not lat.get(f"lease/{n}", {"failed": True})["failed"]
                and lat[f"lease/{n}"]["all_p999_us"] > 50_000]
        lines += ["**Calls over 50 ms**, over all rounds: " + ", ".join(f"{k}: {v['over_50ms_total']}" for k, v in slow)
                  + (" — at every concurrency, with one client too, and for `Admin.Stats` as well"
                     if len(slow) == len(lat) else "") + ". They set the maxima" + (
                      f", and p99.9 from {tail[0]} clients on" if tail else "") + ". Their cause is in the daemon's "
                  "gRPC server, not in the network or the clients: see *Findings* below.", ""]
    return lines


def _batching(doc):
    lines = ["## Allocations per lease RPC in steady state", "",
             "One client process connects with `memd::Client`, creates a shm region of its own, fills a ring of "
             "live objects, warms up, then runs the measured alloc+free pairs (free a random slot's object, "
             "allocate one of a random size, write a tag at both ends). `Client::lease_calls()` (every Lease, "
             "Release and run call of the process) is read right before and after the measured part; the daemon's "
             "own count (`RegionInfo.lease_rpcs`) agrees in every run" + (
                 "" if all(s.get("daemon_agrees", True) for s in doc["batching"].values())
                 else " **except some (see problems)**") +
             ", and `Admin.ListClients` splits it into Lease calls and the rest. **allocs/RPC** is all measured "
             "allocations over all steady-state calls, pooled over the rounds.", ""]
    headers = ["workload", "what", "steady calls (median; range)", "of which Lease", "Release and others",
               "allocs/RPC", "fill calls", "warm-up calls", "blocks held", "ns/pair"]
    rows = []
    for name, s in doc["batching"].items():
        if s["failed"]:
            rows.append([name, s["summary"], f"**FAIL** ({s['error']})"] + [""] * (len(headers) - 3))
            continue
        per_call = (f"{s['allocs_per_call']:,.0f}" if s["allocs_per_call"] is not None
                    else f"> {s['allocs']:,.0f} (no call)")
        rows.append([name, s["summary"],
                     f"{s['steady_calls']:,.0f} ({s['steady_calls_min']:,.0f}–{s['steady_calls_max']:,.0f})",
                     f"{s['steady_lease_calls']:,.0f}", f"{s['steady_other_calls']:,.0f}", per_call,
                     f"{s['fill_calls']:,.0f}", f"{s['warmup_calls']:,.0f}", f"{s['blocks_held']:,.0f}",
                     f"{s['ns_per_pair']:.0f}"])
    lines += report._table(headers, rows, ["---", "---"] + ["---:"] * (len(headers) - 2)) + [""]
    for name, s in doc["batching"].items():
        if s["failed"] or not s["steady_calls"]:
            continue
        if s["allocs_per_call"] is not None and s["allocs_per_call"] < _allocs_target(doc):
            share = ratio(s["steady_other_calls"], s["steady_calls"])
            lines += [f"Why **{name}** misses the bar: {share * 100:.0f}% of its steady-state calls are "
                      "Releases, the rest Leases. `region/leased_blocks.cc` leases in batches (2, doubling up to 32 "
                      "blocks, fewer for big blocks) and keeps the empty blocks thread heaps give back in a "
                      "per-class stash, giving back each second what no thread took since the last trim, and at "
                      "a cap (4 MiB or 64 blocks per class; half the pages in use for all classes) the oldest half "
                      "of the class. A mid-size block holds as few as 2–4 objects of 16–32 KiB, so random frees "
                      "empty blocks often and the number of blocks in use swings as the ring churns; a call "
                      "comes each time a class's swing passes what its stash holds.", ""]
    return lines


def _shared(doc):
    cells = doc["shared"]["cells"]
    window = doc["settings"]["shared_window_s"]
    lines = ["## Shared heap through the daemon", "",
             "bench_shared_heap's `shared_small` loop (8–512 B alloc+free pairs, 4,096 live objects per process, "
             f"a {window:g} s window; see `bench/shared/README.md`) on one shm heap, in the same interleaved "
             "rounds: **boost-shm** (Boost.Interprocess `managed_shared_memory`), **memd-shm** (the daemonless "
             "library: the parent owns the region and serves leases on a plain Unix socket, `Region::serve`) and "
             "**memd-daemon** (the region served by this run's memd; each worker connects with its own "
             "`memd::Client` after the fork and leases blocks over gRPC). Nothing is made durable on the timed path "
             "in any of them (tmpfs). Each case ran "
             f"{doc['settings']['shared_repeats']} times per round; **pairs/s** is the median of all its runs "
             "(**mean** and the **range** beside it: one window's rate varies a lot from run to run on this "
             "machine), **±** is half the ns/pair range over the median. **lease RPCs** counts the calls all "
             "memd-daemon workers made to the daemon inside the window (`Client::lease_calls()`, median of the "
             "runs; max in brackets).", ""]
    for procs in sorted({c["procs"] for c in cells.values()}):
        mine = {c["allocator"]: c for c in cells.values() if c["procs"] == procs}
        if not mine:
            continue
        base = mine.get("memd-shm")
        boost = mine.get("boost-shm")
        headers = ["allocator", "runs", "pairs/s", "mean", "range", "ns/pair", "±", "balance", "lease RPCs in window",
                   "× memd-shm pairs/s", "× boost-shm pairs/s"]
        rows = []
        for name in doc["settings"].get("shared_allocators", DEFAULT_SHARED_ALLOCATORS):
            c = mine.get(name)
            if c is None:
                continue
            if c["failed"]:
                rows.append([name, f"**FAIL** ({c['error']})"] + [""] * (len(headers) - 2))
                continue
            spread = ratio((c["ns_max"] - c["ns_min"]) / 2, c["ns_per_pair"])
            calls = "—" if c.get("remote_calls") is None else f"{c['remote_calls']:,.0f} ({c['remote_calls_max']:,})"
            rel = lambda other: (_times(ratio(c["pairs_per_s"], other["pairs_per_s"]))
                                 if other and not other["failed"] else "—")
            rows.append([name, c["rounds"], f"{c['pairs_per_s']:,.0f}", f"{c['pairs_per_s_mean']:,.0f}",
                         f"{c['pairs_per_s_min'] / 1e6:.1f}–{c['pairs_per_s_max'] / 1e6:.1f} M",
                         f"{c['ns_per_pair']:.0f}",
                         "—" if spread is None else f"{spread * 100:.0f}%",
                         "—" if c["balance"] is None else f"{c['balance']:.2f}", calls, rel(base), rel(boost)])
        lines += [f"#### {procs} process{'es' if procs > 1 else ''}", ""]
        lines += report._table(headers, rows) + [""]
    return lines


def _findings(doc):
    lines = ["## Findings", ""]
    lat = doc["latency"]
    slow = sum(v["over_50ms_total"] for v in lat.values() if not v["failed"])
    if slow:
        levels = [k.split("/")[1] for k, v in sorted(lat.items(), key=lambda kv: int(kv[0].split("/")[1]))
                  if not v["failed"] and v["over_50ms_total"]]
        lines += [f"- **Calls over 50 ms:** {slow:,} in this run, with {', '.join(levels)} concurrent clients "
                  "(see the latency table). An earlier run (`daemon-2026-11-22.md`) had them at every concurrency, "
                  "1 client and `Admin.Stats` included: gRPC 1.51's callback-API pollers (`nexting_thread`, which "
                  "sleep 100 ms after an idle second) served the socket while `Sessions.Open` used the callback "
                  "API; traced by hand with `strace -f` and `gdb` on memd. Sessions now run on a synchronous "
                  "handler. Where they remain here, more client processes than the machine's CPUs share them "
                  "with the daemon; this script does not establish their cause.", ""]
    for name, s in doc["batching"].items():
        if not s["failed"] and s["allocs_per_call"] is not None and s["allocs_per_call"] < _allocs_target(doc):
            lines += [f"- **Releases** (`region/leased_blocks.cc`): in the {name} workload "
                      f"{s['steady_other_calls']:,.0f} of {s['steady_calls']:,.0f} steady-state calls are "
                      "Releases of 16 blocks each (see above).", ""]
    one = lat.get("lease/1", {})
    window_us = doc["settings"]["shared_window_s"] * 1e6
    for t in doc["shared"]["targets"]:
        if t.get("measured") is None or t["met"]:
            continue
        cell = doc["shared"]["cells"].get(f"shared_small/memd-daemon/{t['procs']}/window", {})
        said = (f"- memd-daemon with {t['procs']} process{'es' if t['procs'] > 1 else ''} reached "
                f"{t['measured']:.2f}× memd-shm's throughput (median of the runs).")
        if cell.get("remote_calls") is not None and not one.get("failed", True):
            # Per process: the calls are spread over the workers, each running the whole window.
            spent = cell["remote_calls"] / t["procs"] * one["lease_p50_us"]
            said += (f" Its workers made {cell['remote_calls']:,.0f} lease RPCs in the window; at the 1-client "
                     f"median round trip ({one['lease_p50_us']:.0f} µs) that is {spent / 1000:.1f} ms per process, "
                     f"{spent / window_us * 100:.1f}% of the window, against a gap of "
                     f"{(1 - t['measured']) * 100:.0f}%. A call that meets one of the stalls above costs up to "
                     "~100 ms (10% of a 1 s window); beyond that, the gap is within this machine's spread from run "
                     "to run (see the range column).")
        lines += [said, ""]
    return lines if len(lines) > 2 else []


def render(doc):
    lines = _header(doc) + _targets(doc) + _latency(doc) + _batching(doc) + _shared(doc) + _findings(doc)
    return "\n".join(lines) + "\n"
