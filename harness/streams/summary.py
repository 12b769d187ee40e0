"""Counting records: outcomes (every one, zeros too), flags, percentiles."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from harness.quantiles import percentile, quantile_of_sorted
from harness.streams.record import FLAGS, Outcome, StreamRecord

__all__ = ["count_flags", "count_outcomes", "latency_summary", "percentile", "quantile_of_sorted"]


def count_outcomes(records: Iterable[StreamRecord]) -> dict[str, int]:
    counts = Counter(r.outcome for r in records)
    return {o.value: counts.get(o.value, 0) for o in Outcome}


def count_flags(records: Iterable[StreamRecord]) -> dict[str, int]:
    counts = Counter(f for r in records for f in r.flags)
    return {f: counts.get(f, 0) for f in FLAGS}


def latency_summary(records: Sequence[StreamRecord]) -> dict:
    ttft = [r.ttft_s for r in records if r.ttft_s is not None]
    e2e = [r.duration_s for r in records if r.outcome == Outcome.COMPLETE]
    itl = [r.itl_max_s for r in records if r.itl_max_s is not None]
    out = {}
    for name, vals in (("ttft_s", ttft), ("e2e_s", e2e), ("itl_max_s", itl)):
        out[name] = {f"p{p}": percentile(vals, p) for p in (50, 90, 99)} | {"n": len(vals)}
    return out
