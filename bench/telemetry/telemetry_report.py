"""Renders a run_telemetry.py results document (the dict saved as JSON) as
Markdown, so a report can always be regenerated from its JSON.

Every ratio is of times (ns per pair, or seconds), so above 1 means slower:
telemetry / memd is the cost of turning telemetry on; memd /
memd-pre-telemetry the cost of what telemetry added with it off (counters,
the sampling countdown, frame pointers)."""
import statistics

from harness.report import _table, title_and_machine
from harness.stats import fmt, geomean

PAIRS = [  # (numerator, denominator, column)
    ("memd", "memd-pre-telemetry", "off / pre"),
    ("memd-telemetry", "memd", "**on / off**"),
    ("memd-telemetry", "memd-pre-telemetry", "**on / pre**"),
    ("memd-sample-64k", "memd", "64k / off"),
]
VERDICT_PAIRS = PAIRS[1:3]
GROUPS = [("small", "small objects (16-256 B), the fast path"), ("4k", "4 KiB objects"),
          ("big", "big objects (64 KiB and 1 MiB, one byte touched or all filled)"), ("workload", "workloads")]


def group(key):
    if key == "startup":
        return "startup"
    if key.startswith("wl_"):
        return "workload"
    size = int(key.rsplit("/", 1)[1])
    return "small" if size <= 1024 else "4k" if size <= 4096 else "big"


def label(key, doc, unit=True):
    if key == "startup":
        return "/bin/true: start-up and exit" + (" (ms)" if unit else "")
    if key.startswith("wl_"):
        p = next((p for p in doc["programs"] if p["name"] == key), {})
        return f"{key}, {p.get('threads', 1)} thread(s), scale {doc['settings']['scale']:g}" + (" (s)" if unit else "")
    parts = key.split("/")
    threads = parts[1].split(":")[1] if len(parts) == 3 else "1"
    kind = parts[0].removeprefix("BM_")
    return f"{kind} {parts[-1]} B, {threads} thread{'s' if threads != '1' else ''}" + (" (M pairs/s)" if unit else "")


def shown(key, v):
    """What the throughput table shows for a time v: M pairs/s, seconds, or ms."""
    if key == "startup":
        return v * 1e3
    if key.startswith("wl_"):
        return v
    return 1e3 / v


def present(xs):
    return [x for x in xs if x is not None]


def cell(key, xs):
    xs = present(xs)
    if not xs:
        return "failed"
    lo, hi = sorted([shown(key, min(xs)), shown(key, max(xs))])
    digits = 1 if key == "startup" else 2
    return f"{fmt(shown(key, statistics.median(xs)), digits)} ({fmt(lo, digits)}–{fmt(hi, digits)})"


def ratios(values, num, den):
    """(median over the rounds of the ratio within a round, [those ratios]) of
    times; None if missing. Within a round the two runs were seconds apart:
    the machine's drift, much larger than the differences measured here on a
    shared virtual machine, cancels there and not between medians."""
    a, b = values.get(num) or [], values.get(den) or []
    per_round = [x / y for x, y in zip(a, b) if x is not None and y]
    return (statistics.median(per_round) if per_round else None), per_round


def without_startup(doc, key, num, den):
    """A workload's time ratio with the difference of the two cases' start-up
    cost (the /bin/true row) taken out of the numerator; None elsewhere."""
    start, v = doc["values"].get("startup", {}), doc["values"][key]
    if group(key) != "workload" or not present(start.get(num, [])) or not present(start.get(den, [])):
        return None
    extra = statistics.median(present(start[num])) - statistics.median(present(start[den]))
    per_round = [(x - extra) / y for x, y in zip(v.get(num) or [], v.get(den) or []) if x is not None and y]
    return statistics.median(per_round) if per_round else None


def iqr(xs):
    if len(xs) < 2:
        return None
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[2]


def verdict(r, per_round, target):
    if r is None:
        return "—"
    word = "met" if r <= 1 + target else "**MISSED**"
    q = iqr(per_round)
    if q and q[0] <= 1 + target < q[1]:
        word += " (within noise)"
    return word


def ratio_cell(r, per_round):
    if r is None:
        return "—"
    q = iqr(per_round)
    return f"{r:.3f}" + (f" [{q[0]:.3f}–{q[1]:.3f}]" if q else "")


def summary_lines(doc):
    target = doc["settings"]["target"]
    lines = []
    for g, title in GROUPS:
        keys = [k for k in doc["values"] if group(k) == g]
        if not keys:
            continue
        parts = []
        for num, den, col in VERDICT_PAIRS:
            g_ratio = geomean([ratios(doc["values"][k], num, den)[0] for k in keys])
            if g_ratio is None:
                continue
            met = sum(ratios(doc["values"][k], num, den)[0] <= 1 + target for k in keys
                      if ratios(doc["values"][k], num, den)[0] is not None)
            part = (f"{num} / {den} {g_ratio:.3f} ({'met' if g_ratio <= 1 + target else '**MISSED**'}; "
                    f"{met} of {len(keys)} rows within {target:.0%}")
            if g == "workload":
                adjusted = geomean([without_startup(doc, k, num, den) for k in keys])
                if adjusted is not None:
                    part += f"; {adjusted:.3f} with the start-up difference taken out"
            parts.append(part + ")")
        lines.append(f"- {title}, geometric mean: " + "; ".join(parts))
    return lines


def _header(doc):
    s = doc["settings"]
    lines = title_and_machine(doc, "Telemetry on the malloc/free fast path", "Packages")
    lines += [
        f"- memd tree measured: {doc['memd_revision']}; pre-telemetry shim: commit {doc['pre_revision']} "
        f"(`{s['pre_shim']}`, a release build of a worktree of it)",
        "- Builds up to date with their trees (`ninja -n` has nothing to do): "
        f"this tree {fmt_bool(doc['build_current'])}, pre-telemetry {fmt_bool(doc['pre_build_current'])}",
        f"- Settings: {s['rounds']} rounds (interleaved, case order rotated each round), microbenchmark "
        f"`--benchmark_min_time={s['min_time_s']:g}` per case, workloads at scale {s['scale']:g} with "
        f"{s['threads']} threads where multi-threaded; target: telemetry on at most {s['target']:.0%} slower",
    ]
    lines += [f"- Case {c}: this tree's shim with " + " ".join(f"`{k}={v}`" for k, v in env.items())
              for c, env in s["case_env"].items()]
    lines += [f"- The daemon: `{s['daemon']}` (started by the runner, one for the whole run, stopped with SIGTERM)",
              f"- 2-thread loops: `bench/telemetry/micro_threads.cc` (bench_malloc_micro's functions, "
              f"`Threads(2)->UseRealTime()`), compiled with `{s['helper_compiled_with']}`"]
    d = doc["daemon_telemetry"]
    if not d.get("error"):
        lines.append(f"- What the daemon received from the {d['telemetry_processes']} telemetry processes: "
                     f"{d.get('memd_sessions_opened_total', 0):.0f} sessions, "
                     f"{d.get('memd_telemetry_reports_total', 0):.0f} reports, "
                     f"{d.get('memd_telemetry_samples_total', 0):.0f} samples, "
                     f"{d.get('memd_telemetry_rejected_total', 0):.0f} rejected")
    for name, st in (("start", doc["state_start"]), ("end", doc["state_end"])):
        lines.append(f"- Load average (1, 5, 15 min) at the {name} ({st['time']}): "
                     + " ".join(f"{x:.2f}" for x in st["load"])
                     + (f"; running: {', '.join(st['busy'])}" if st["busy"] else "; no compiler or build tool running"))
    waits = doc.get("quiet_wait") or []
    if len(waits) > 1:
        lines.append(f"- Waited {len(waits) - 1} min for a quiet machine (1-min load from "
                     f"{waits[0]['load'][0]:.2f} to {waits[-1]['load'][0]:.2f})")
    c = doc["cpu"]
    lines.append(f"- Other work on the machine during the run: {c['other_s']:.0f} CPU-seconds of the "
                 f"{c['cpu_capacity_s']:.0f} its CPUs had in {c['wall_s']:.0f} s "
                 f"({(c['other_share'] or 0):.0%}), besides the {c['own_s']:.0f} this run's processes used; "
                 f"hypervisor steal {c['steal_s']:.1f} s")
    if s.get("ignored_env"):
        lines.append("- Ignored from the environment: " + ", ".join(f"`{k}`" for k in s["ignored_env"]))
    return lines + [""]


def fmt_bool(v):
    return {True: "yes", False: "**no**", None: "not known"}[v]


def render(doc):
    cases = doc["settings"]["cases"]
    target = doc["settings"]["target"]
    lines = _header(doc)
    lines += ["## Verdict", "",
              f"Telemetry on (`memd-telemetry`, sampling one allocation per 512 KiB) against off (`memd`) and "
              f"against the shim from before telemetry (`memd-pre-telemetry`); the target is {target:.0%}.", ""]
    lines += summary_lines(doc) + [""]

    lines += ["## Throughput", "",
              "Medians over the rounds, (min–max) of the rounds. Microbenchmark rows: million malloc/free pairs "
              "per second, all threads together (higher is better); workloads: wall time in seconds, "
              "`/bin/true`: milliseconds (lower is better).", ""]
    rows = [[label(k, doc)] + [cell(k, v.get(c, [])) for c in cases] for k, v in doc["values"].items()]
    lines += _table(["program"] + [f"`{c}`" for c in cases], rows) + [""]

    lines += ["## Ratios", "",
              "Ratios of times (above 1: slower), each taken within a round (where the cases of a program ran "
              "back to back, seconds apart): the median over the rounds, and in brackets their interquartile "
              "range, which shows how much of a difference is noise. off / pre: the counters, the sampling "
              "countdown and frame pointers with telemetry off; on / off: turning telemetry on; on / pre: all "
              "of telemetry; 64k / off: sampling eight times as often. Verdicts against the target; *within "
              "noise*: the target lies inside the interquartile range. *start-up out* (workloads): the numerator "
              "less the difference of the two cases' median `/bin/true` times, i.e. without the fixed cost of "
              "loading the daemon link and opening a session, which the microbenchmark rows never include "
              "(Google Benchmark times its loops only).", ""]
    rows = []
    for k, v in doc["values"].items():
        row = [label(k, doc, unit=False)]
        for num, den, _ in PAIRS:
            row.append(ratio_cell(*ratios(v, num, den)))
        if k != "startup":
            row += [verdict(*ratios(v, num, den), target) for num, den, _ in VERDICT_PAIRS]
        else:
            row += ["(fixed cost)", "(fixed cost)"]
        row += [fmt(without_startup(doc, k, num, den), 3) for num, den, _ in VERDICT_PAIRS]
        rows.append(row)
    lines += _table(["program"] + [col for _, _, col in PAIRS] + ["on / off ≤ target", "on / pre ≤ target",
                                                                  "on / off, start-up out", "on / pre, start-up out"],
                    rows) + [""]
    return "\n".join(lines) + "\n"
