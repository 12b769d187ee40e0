"""An engine's latency histograms (vllm:time_to_first_token_seconds and
vllm:inter_token_latency_seconds) over a window, and two engines' compared: what the
shadow scenario judges its candidate by, as the candidate's answers never reach a client
that could time them. Pure: parse_metrics' keys in, figures out.

A window's histogram is each bucket's increase from the first read to the last (a pod's
reads summed over pods). Quantiles are interpolated within a bucket, as Prometheus'
histogram_quantile does; two histograms are compared with a Mann-Whitney U test on the
bucket each observation fell in (ties within a bucket, as the test allows), so a
difference is claimed only beyond the noise and the buckets' resolution.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from harness.significance import ALPHA

TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
# a change is claimed only when the median moved by at least this share, and a bucket
RELATIVE = 0.10
MAX_OBSERVATIONS = 20000  # per side, for the test: the counts scaled down beyond it


def buckets(metrics: Mapping[str, float], family: str) -> list[tuple[float, float]]:
    """(upper bound, cumulative count) of one histogram, by bound; +Inf last."""
    prefix = f"{family}_bucket[le="
    out = []
    for key, value in metrics.items():
        if key.startswith(prefix) and key.endswith("]"):
            bound = key[len(prefix) : -1]
            out.append((math.inf if bound == "+Inf" else float(bound), value))
    return sorted(out)


def increase(
    before: list[tuple[float, float]], after: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    """A histogram's growth from one read to a later one (a bucket new since: from 0;
    one that shrank, an engine restarted: its later count)."""
    was = dict(before)
    out = []
    for bound, n in after:
        grew = n - was.get(bound, 0.0)
        out.append((bound, grew if grew >= 0 else n))
    return out


def added(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Two pods' histograms summed, bucket by bucket."""
    total: dict[float, float] = {}
    for bound, n in [*a, *b]:
        total[bound] = total.get(bound, 0.0) + n
    return sorted(total.items())


def count(h: list[tuple[float, float]]) -> int:
    return int(round(h[-1][1])) if h else 0


def quantile(h: list[tuple[float, float]], q: float) -> float | None:
    """Prometheus' histogram_quantile: linear within the bucket the rank falls in; the
    highest finite bound when it falls in +Inf; None for an empty histogram."""
    n = h[-1][1] if h else 0
    if n <= 0:
        return None
    rank = q * n
    lower, below = 0.0, 0.0
    for bound, cum in h:
        if cum >= rank:
            if math.isinf(bound):
                return lower
            inside = cum - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, cum
    return lower


def compare(base: list[tuple[float, float]], cand: list[tuple[float, float]], min_count: int):
    """('worse' | 'better' | '', what was said) for the candidate's histogram against the
    baseline's, over the same window."""
    nb, nc = count(base), count(cand)
    if nb < min_count or nc < min_count:
        return "", f"cannot tell: {nb} and {nc} observations (fewer than {min_count})"
    from scipy.stats import mannwhitneyu

    p = float(mannwhitneyu(_ranks(base), _ranks(cand), alternative="two-sided").pvalue)
    mb, mc = quantile(base, 0.5), quantile(cand, 0.5)
    said = f"Mann-Whitney U on the buckets p = {p:.2g}, n = {nb} and {nc}"
    if p >= ALPHA:
        return "", said + f": within the noise at {ALPHA:g}"
    if mb is not None and mc is not None and abs(mc - mb) < RELATIVE * mb:
        return "", said + f": a median change under {RELATIVE:.0%}"
    return ("worse" if (mc or 0) > (mb or 0) else "better"), said


def _ranks(h: list[tuple[float, float]]) -> list[int]:
    """Each observation as the index of its bucket (scaled down past MAX_OBSERVATIONS)."""
    total = count(h)
    scale = min(1.0, MAX_OBSERVATIONS / total) if total else 1.0
    out: list[int] = []
    below = 0.0
    for i, (_, cum) in enumerate(h):
        out += [i] * int(round((cum - below) * scale))
        below = cum
    return out
