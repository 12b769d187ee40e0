"""maxSurge and maxUnavailable as pod counts, as the Deployment controller resolves
them (ResolveFenceposts): written once, for the config, the planner and the linter."""

from __future__ import annotations

import math


def count(value, replicas: int, round_up: bool, name: str) -> int:
    """An IntOrString (2 or "25%") as pods: maxSurge rounds up, maxUnavailable down."""
    text = str(value).strip()
    try:
        if text.endswith("%"):
            share = float(text[:-1]) * replicas / 100
            n = math.ceil(share) if round_up else math.floor(share)
        else:
            n = int(text)
    except ValueError:
        raise ValueError(f"{name}: expected a count or a percentage, got {value!r}") from None
    if n < 0:
        raise ValueError(f"{name} cannot be negative")
    return n


def resolve(max_surge, max_unavailable, replicas: int) -> tuple[int, int]:
    """(surge, unavailable) pods; both zero becomes unavailable 1, as Kubernetes does."""
    surge = count(max_surge, replicas, True, "max_surge")
    unavailable = count(max_unavailable, replicas, False, "max_unavailable")
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable
