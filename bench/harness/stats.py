"""Small statistics and formatting helpers shared by the report code."""
import math
import statistics


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def geomean(values):
    values = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def ratio(a, b):
    return a / b if a is not None and b else None


def fmt(value, digits=2, suffix=""):
    return "—" if value is None else f"{value:.{digits}f}{suffix}"


def mib(n_bytes):
    return None if n_bytes is None else n_bytes / (1 << 20)
