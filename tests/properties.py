"""The settings every property-based (Hypothesis) suite runs with: bounded example counts
so the unit tier stays under a minute, no deadline per example on a noisy machine, and
derandomized, so CI runs exactly the examples that were run here."""

from __future__ import annotations

from hypothesis import HealthCheck, settings


def bounded(max_examples: int) -> settings:
    return settings(
        max_examples=max_examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        database=None,
        derandomize=True,
    )
