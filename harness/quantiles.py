"""Quantiles, with no dependencies: shared by the judge, the simulator and the load
workers, which must not import one another (the simulator never loads the judge)."""

from __future__ import annotations

from collections.abc import Sequence


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
