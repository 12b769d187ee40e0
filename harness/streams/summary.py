"""Counting records: outcomes (every one, zeros too), flags, percentiles."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from harness.streams.record import FLAGS, Outcome, StreamRecord


def count_outcomes(records: Iterable[StreamRecord]) -> dict[str, int]:
    counts = Counter(r.outcome for r in records)
    return {o.value: counts.get(o.value, 0) for o in Outcome}


def count_flags(records: Iterable[StreamRecord]) -> dict[str, int]:
    counts = Counter(f for r in records for f in r.flags)
    return {f: counts.get(f, 0) for f in FLAGS}


def quantile_of_sorted(ordered: Sequence[float], q: float) -> float | None:
    """The value at index int(q * n) of values sorted already, q in [0, 1].

    For figures computed on every record or scrape, where the caller sorts once and
    reads several quantiles; percentile() below is the nearest-rank report figure.
    """
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile, p in [0, 100]."""
    if not values:
        return None
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[k]


def latency_summary(records: Sequence[StreamRecord]) -> dict:
    ttft = [r.ttft_s for r in records if r.ttft_s is not None]
    e2e = [r.duration_s for r in records if r.outcome == Outcome.COMPLETE]
    itl = [r.itl_max_s for r in records if r.itl_max_s is not None]
    out = {}
    for name, vals in (("ttft_s", ttft), ("e2e_s", e2e), ("itl_max_s", itl)):
        out[name] = {f"p{p}": percentile(vals, p) for p in (50, 90, 99)} | {"n": len(vals)}
    return out
