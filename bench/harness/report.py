"""Renders a results document (the same dict that is saved as JSON) as
Markdown, so a report can always be regenerated from its JSON."""
from .stats import fmt, geomean, median, mib, ratio
from .summary import MASS_FREE_LIMIT

MICRO_SIZES_LABEL = {1 << 10: "1K", 4 << 10: "4K", 16 << 10: "16K", 64 << 10: "64K", 256 << 10: "256K", 1 << 20: "1M"}


def _table(headers, rows, align=None):
    align = align or ["---"] + ["---:"] * (len(headers) - 1)
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(align) + " |"]
    # A '|' inside a cell (error messages can hold one) would split the row.
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return lines


def title_and_machine(doc, title, packages_label):
    """The top of a report: title, problems, and what ran where (the command,
    the machine, the compiler, the package versions)."""
    m = doc["machine"]
    lines = [f"# {title} — {doc['date']}", ""]
    if doc.get("problems"):
        lines += ["> **PROBLEMS — these results are not trustworthy:**", ">"]
        lines += [f"> - {p}" for p in doc["problems"]] + [""]
    return lines + [
        f"- Command: `{doc['command']}` (from the top of the source tree)",
        f"- Date: {doc['date']}",
        f"- Machine: `{m['uname']}`",
        f"- CPU: {m['cpu_model']}, nproc {m['nproc']}, memory {m['memory']}, kernel {m['kernel']}",
        f"- Compiler: {m['compiler']}",
        f"- {packages_label}: " + ", ".join(f"{p} {v}" for p, v in doc["packages"].items()),
    ]


def _header(doc):
    s = doc["settings"]
    lines = title_and_machine(doc, "memd heap benchmarks", "Peers")
    lines += [
        f"- memd tree: {doc['memd_revision']}",
        f"- Settings: rounds={s['rounds']}, threads={s['threads']}, scale={s['scale']:g}, "
        f"allocators={', '.join(s['allocators'])}",
    ]
    # .get: reports saved before variants existed lack these keys.
    lines += [f"- Variant {a}: memd with " + " ".join(f"`{k}={v}`" for k, v in env.items())
              for a, env in s.get("allocator_env", {}).items()]
    if s.get("ignored_env"):
        lines += ["- Ignored from the environment: " + ", ".join(f"`{k}`" for k in s["ignored_env"])]
    lines += [f"- **Skipped {a}**: {why}" for a, why in s["skipped"].items()]
    return lines + [""]


# A cell's key and the per-run field it is the median of.
_RUN_FIELD = {"time_s": "wall_s", "peak_rss_bytes": "maxrss_kib"}


def paired_ratio(doc, workload, a, b, key):
    """a's `key` over b's, taken within each round both ran (every round runs
    every allocator), then the median over rounds. A report saved without its
    runs falls back to the ratio of the medians."""
    runs = doc.get("runs")
    cells = doc["workloads"][workload]["cells"]
    if not runs:
        ca, cb = cells.get(a), cells.get(b)
        ok = ca and cb and not ca["failed"] and not cb["failed"]
        return ratio(ca[key], cb[key]) if ok else None
    per_round = {}
    for r in runs:
        if r["workload"] == workload and r["ok"] and r["allocator"] in (a, b):
            per_round.setdefault(r["round"], {})[r["allocator"]] = r[_RUN_FIELD[key]]
    values = [ratio(v[a], v[b]) for _, v in sorted(per_round.items()) if a in v and b in v]
    values = [v for v in values if v is not None]
    return median(values) if values else None


def _workload_table(doc, allocators):
    rows = []
    for name, w in doc["workloads"].items():
        base = w["cells"].get("glibc", {})
        for a in allocators:
            c = w["cells"].get(a)
            if c is None:
                continue
            if c["failed"]:
                rows.append([name, a, f"**FAIL** ({c['error']})"] + [""] * 7)
                continue
            # Half the min-max range over the rounds, relative to the median: a
            # quick read of how much of a time difference could be noise.
            spread = ratio((c["time_max_s"] - c["time_min_s"]) / 2, c["time_s"])
            rows.append([
                name, a,
                fmt(c["time_s"]), fmt(None if spread is None else spread * 100, 0, "%"),
                fmt(paired_ratio(doc, name, a, "glibc", "time_s") if base else None, suffix="×"),
                fmt(mib(c["peak_rss_bytes"]), 1),
                fmt(paired_ratio(doc, name, a, "glibc", "peak_rss_bytes") if base else None, suffix="×"),
                fmt(mib(c["peak_live_bytes"]), 1), fmt(c["fragmentation"]),
                f"{c['minflt'] / 1000:.0f}k",
            ])
    headers = ["workload", "allocator", "time (s)", "±", "× glibc", "peak RSS (MiB)", "× glibc",
               "peak live (MiB)", "frag (RSS/live)", "minor faults"]
    return ["## Workloads (median of rounds)", "",
            "Times and sizes are medians of the rounds; every ratio (× glibc here, and in the tables below) is "
            "taken within a round, then the median over rounds.", ""] + _table(headers, rows, ["---", "---"] + ["---:"] * 8) + [""]


def _ratio_matrix(doc, allocators, key, title):
    """Rows: workloads; columns: allocator / glibc; plus memd / mimalloc."""
    others = [a for a in allocators if a != "glibc"]
    with_vs = "memd" in allocators and "mimalloc" in allocators
    headers = ["workload"] + others + (["memd / mimalloc"] if with_vs else [])
    rows, columns = [], {h: [] for h in headers[1:]}
    for name, w in doc["workloads"].items():
        row = [name]
        for a in others:
            r = paired_ratio(doc, name, a, "glibc", key)
            columns[a].append(r)
            row.append(fmt(r, suffix="×"))
        if with_vs:
            r = paired_ratio(doc, name, "memd", "mimalloc", key)
            columns["memd / mimalloc"].append(r)
            row.append(fmt(r, suffix="×"))
        rows.append(row)
    rows.append(["**geomean**"] + [f"**{fmt(geomean(columns[h]), suffix='×')}**" for h in headers[1:]])
    return [f"## {title}", ""] + _table(headers, rows) + [""]


def _mass_free_table(doc, allocators):
    rows = []
    for a in allocators:
        m = doc["mass_free"].get(a)
        if m is None:
            continue
        rows.append([a, fmt(mib(m["rss_after_free_bytes"]), 1), fmt(mib(m["rss_baseline_bytes"]), 1),
                     fmt(mib(m["live_after_free_bytes"]), 1), fmt(m["rss_over_live"], suffix="×"),
                     "yes" if m["within_limit"] else "**no**"])
    if not rows:
        return []
    limit = f"{(MASS_FREE_LIMIT - 1) * 100:.0f}%"
    headers = ["allocator", "RSS after free (MiB)", "start-up RSS (MiB)", "live (MiB)",
               "(RSS − start-up) / live", f"within {limit}"]
    intro = ["## Mass free: resident memory ~200 ms after freeing 95%", "",
             f"Passes when resident memory, less the start-up baseline, is within {limit} of the live data.", ""]
    return intro + _table(headers, rows, ["---"] + ["---:"] * 5) + [""]


def _micro_tables(doc, allocators):
    micro = doc.get("micro")
    if not micro:
        return []
    lines = ["## Microbenchmark: ns per malloc/free pair (ratio to glibc)", ""]
    if micro.get("error"):
        return lines + [f"Not run: {micro['error']}", ""]
    per = micro["by_allocator"]
    shown = [a for a in allocators if a in per]
    lines += [f"- {a}: **FAIL** ({per[a]['error']})" for a in shown if per[a].get("error")]
    shown = [a for a in shown if not per[a].get("error")]
    with_vs = "memd" in shown and "mimalloc" in shown
    ns_of = lambda a, key: per.get(a, {}).get("ns", {}).get(key)
    for bench, title in (("BM_pair", "malloc then free at once"), ("BM_batch", "batch: 512 mallocs, then 512 frees"),
                         ("BM_size_cycle", "sizes in turn: a batch of each of 8 sizes from the size up, 8 B apart")):
        sizes = sorted({int(k.split("/")[1]) for a in shown for k in per[a]["ns"] if k.startswith(bench + "/")})
        rows = []
        for size in sizes:
            key = f"{bench}/{size}"
            row = [MICRO_SIZES_LABEL.get(size, str(size))]
            for a in shown:
                ns = ns_of(a, key)
                row.append(fmt(ns, 1) if a == "glibc" else
                           f"{fmt(ns, 1)} ({fmt(ratio(ns, ns_of('glibc', key)), suffix='×')})")
            if with_vs:
                row.append(fmt(ratio(ns_of("memd", key), ns_of("mimalloc", key)), suffix="×"))
            rows.append(row)
        if rows:
            headers = ["size"] + shown + (["memd / mimalloc"] if with_vs else [])
            lines += [f"### {title}", ""] + _table(headers, rows) + [""]
    return lines


def render(doc):
    allocators = doc["settings"]["allocators"]
    lines = _header(doc)
    lines += _workload_table(doc, allocators)
    lines += _ratio_matrix(doc, allocators, "time_s", "Time relative to glibc (lower is better)")
    lines += _ratio_matrix(doc, allocators, "peak_rss_bytes", "Peak RSS relative to glibc (lower is better)")
    lines += _mass_free_table(doc, allocators)
    lines += _micro_tables(doc, allocators)
    lines += ["## Checksums", ""]
    lines += ["**MISMATCH** — " + p for p in doc.get("checksum_problems", [])] or \
        ["Identical under every allocator that completed."]
    return "\n".join(lines) + "\n"
