"""Reduces the raw runs to one cell per (workload, allocator), checks the
checksums agree, and extracts the mass-free residency check."""
from collections import Counter

from .stats import median, ratio

# wl_mass_free passes if, after the free, resident memory (minus what the
# process held at start-up) is within this factor of the data still live.
MASS_FREE_LIMIT = 1.10


def cell(runs):
    """Median time/RSS over the rounds of one workload under one allocator."""
    bad = [r for r in runs if not r["ok"]]
    if bad:
        return {"failed": True, "error": bad[0]["error"], "rounds": len(runs)}
    rss = [r["maxrss_kib"] * 1024 for r in runs]
    # Real programs do not report live bytes: then the cell has none.
    live = [int(r["values"]["peak_live_bytes"]) for r in runs if "peak_live_bytes" in r["values"]]
    out = {
        "failed": False,
        "rounds": len(runs),
        "time_s": median([r["wall_s"] for r in runs]),
        "time_min_s": min(r["wall_s"] for r in runs),
        "time_max_s": max(r["wall_s"] for r in runs),
        "peak_rss_bytes": median(rss),
        "peak_live_bytes": median(live),
        "minflt": median([r["minflt"] for r in runs]),
        "cpu_s": median([r["utime_s"] + r["stime_s"] for r in runs]),
        "checksums": sorted({r["values"]["checksum"] for r in runs}),
    }
    out["fragmentation"] = ratio(out["peak_rss_bytes"], out["peak_live_bytes"])
    return out


def checksum_problems(cells):
    """Human-readable complaints; empty when every allocator computed the same
    answer. glibc's checksum is the reference when it is available."""
    ok = {a: c for a, c in cells.items() if not c["failed"]}
    problems = [f"{a}: checksum differs between rounds {c['checksums']}" for a, c in ok.items()
                if len(c["checksums"]) > 1]
    if "glibc" in ok and len(ok["glibc"]["checksums"]) == 1:
        reference = ok["glibc"]["checksums"][0]
    else:
        votes = Counter(s for c in ok.values() for s in c["checksums"])
        reference = votes.most_common(1)[0][0] if votes else None
    problems += [f"{a}: checksum {c['checksums'][0]} != {reference}" for a, c in ok.items()
                 if len(c["checksums"]) == 1 and c["checksums"][0] != reference]
    return problems


def mass_free(runs):
    """Resident memory after the 95% free, relative to live data."""
    good = [r for r in runs if r["ok"] and "rss_after_free_bytes" in r["values"]]
    if not good:
        return None
    pick = lambda key: median([int(r["values"][key]) for r in good])
    rss, baseline, live = pick("rss_after_free_bytes"), pick("rss_baseline_bytes"), pick("live_after_free_bytes")
    excess = ratio(rss - baseline, live)
    return {
        "rss_after_free_bytes": rss,
        "rss_baseline_bytes": baseline,
        "live_after_free_bytes": live,
        "rss_over_live": excess,
        "within_limit": excess is not None and excess <= MASS_FREE_LIMIT,
    }


def validate(run, required=("checksum", "peak_live_bytes")):
    """Marks a run failed if the workload did not print what it must."""
    if run["ok"]:
        missing = [k for k in required if k not in run["values"]]
        if missing:
            run["ok"], run["error"] = False, "output lacks " + ", ".join(missing)
    return run
